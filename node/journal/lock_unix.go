//go:build unix

package journal

import (
	"os"
	"syscall"
)

// lock takes an exclusive lock on f, failing at once if another process
// holds one: two nodes on one data_dir would each take the other's
// journal for their own.
func lock(f *os.File) error {
	return syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
}

// syncDir makes a rename in dir durable.
func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
}
