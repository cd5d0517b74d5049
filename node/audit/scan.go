package audit

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
)

// Files returns the audit directory's files, oldest first (the
// rotated ones by name, then the current one).
func Files(dir string) ([]string, error) {
	rotated, err := filepath.Glob(filepath.Join(dir, "audit-*.jsonl"))
	if err != nil {
		return nil, err
	}
	slices.Sort(rotated)
	cur := filepath.Join(dir, currentFile)
	if _, err := os.Stat(cur); err == nil {
		rotated = append(rotated, cur)
	}
	return rotated, nil
}

// Break is a place where the trail's hash chain does not hold: a
// line was removed, changed or put in between.
type Break struct {
	File string
	Line int
}

func (b Break) Error() string {
	return fmt.Sprintf("%s line %d: the audit chain breaks here (a line before it was removed or changed, or this one was)", b.File, b.Line)
}

// Scan reads the trail in dir, oldest first, and calls fn with each
// record. It returns where the hash chain breaks, if it does, or the
// first error reading the files or from fn. Whole files removed from the
// start of the trail (retention) are not a break.
func Scan(dir string, fn func(Record) error) ([]Break, error) {
	files, err := Files(dir)
	if err != nil {
		return nil, err
	}
	var breaks []Break
	prev := ""
	for _, name := range files {
		f, err := os.Open(name)
		if err != nil {
			return breaks, err
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
		for line := 1; sc.Scan(); line++ {
			var rec Record
			if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
				breaks = append(breaks, Break{File: name, Line: line})
				prev = ""
				continue
			}
			// The oldest line left may follow files removed for retention.
			if oldest := name == files[0] && line == 1; rec.Prev != prev && !oldest {
				breaks = append(breaks, Break{File: name, Line: line})
			}
			sum := sha256.Sum256(sc.Bytes())
			prev = hex.EncodeToString(sum[:])
			if err := fn(rec); err != nil {
				f.Close()
				return breaks, err
			}
		}
		err = sc.Err()
		f.Close()
		if err != nil {
			return breaks, fmt.Errorf("%s: %w", name, err)
		}
	}
	return breaks, nil
}
