//go:build !unix

package journal

import "os"

// lock does nothing where flock(2) is not: one process per data_dir is
// the operator's to keep.
func lock(*os.File) error { return nil }

func syncDir(string) {}
