package audit

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

func writeTrail(t *testing.T, dir string, maxSize int64, from, count int) {
	t.Helper()
	a, err := Open(dir, maxSize, slog.New(slog.NewTextHandler(io.Discard, nil)), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	for i := from; i < from+count; i++ {
		a.Record(&Record{Time: time.Unix(int64(i), 0).UTC(), RequestID: fmt.Sprint("r", i), Node: "eu-1", Tenant: "acme",
			Residency: "eu", Nodes: []string{"us-1", "eu-1"}, Provider: "gpu-eu", ProviderJurisdictions: "eu", Status: 200, Outcome: "ok"})
	}
	a.Close()
}

func scanIDs(t *testing.T, dir string) ([]string, []Break) {
	t.Helper()
	var ids []string
	breaks, err := Scan(dir, func(r Record) error { ids = append(ids, r.RequestID); return nil })
	if err != nil {
		t.Fatal(err)
	}
	return ids, breaks
}

// The trail rotates at its size, chains every line to the one before
// across files and restarts, and shows a line removed or changed.
func TestAuditTrailRotatesAndChains(t *testing.T) {
	dir := t.TempDir()
	writeTrail(t, dir, 1000, 0, 20)
	writeTrail(t, dir, 1000, 20, 5) // a restart goes on with the chain
	files, _ := Files(dir)
	if len(files) < 4 {
		t.Fatalf("%d files: no rotation", len(files))
	}
	for _, f := range files {
		st, _ := os.Stat(f)
		if st.Size() > 1000 || st.Mode().Perm() != 0o600 {
			t.Fatalf("%s: %d bytes, mode %v", f, st.Size(), st.Mode().Perm())
		}
	}
	ids, breaks := scanIDs(t, dir)
	if len(ids) != 25 || ids[0] != "r0" || ids[24] != "r24" || len(breaks) != 0 {
		t.Fatalf("%d records %v, breaks %v", len(ids), ids, breaks)
	}

	// Retention removes the oldest file: not a break.
	if err := os.Remove(files[0]); err != nil {
		t.Fatal(err)
	}
	if _, breaks := scanIDs(t, dir); len(breaks) != 0 {
		t.Fatalf("retention reported as %v", breaks)
	}
	// A line changed in the middle breaks the chain after it.
	b, _ := os.ReadFile(files[1])
	if err := os.WriteFile(files[1], []byte(strings.Replace(string(b), `"provider":"gpu-eu"`, `"provider":"gpu-us"`, 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, breaks := scanIDs(t, dir); len(breaks) != 1 || breaks[0].File != files[1] || breaks[0].Line != 2 {
		t.Fatalf("a changed line: %v", breaks)
	}
	// So does a line removed (any but the newest, which nothing follows
	// yet).
	if err := os.WriteFile(files[1], b, 0o600); err != nil {
		t.Fatal(err)
	}
	mid, _ := os.ReadFile(files[2])
	lines := strings.SplitAfter(string(mid), "\n")
	if len(lines) < 3 { // two lines and the empty rest
		t.Fatalf("%s has %d lines", files[2], len(lines)-1)
	}
	if err := os.WriteFile(files[2], []byte(strings.Join(lines[1:], "")), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, breaks := scanIDs(t, dir); len(breaks) != 1 || breaks[0].File != files[2] || breaks[0].Line != 1 {
		t.Fatalf("a removed line: %v", breaks)
	}
}

// A full queue drops records and counts them; it never blocks a request.
func TestAuditQueueNeverBlocks(t *testing.T) {
	a := &Log{queue: make(chan *Record, 1), log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		records: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "x"}, []string{"outcome"})}
	done := make(chan struct{})
	go func() {
		for range 3 {
			a.Record(&Record{RequestID: "r"})
		}
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("record blocked on a full queue")
	}
}

// A line a crash tore is cut at the next start, and the chain goes on
// unbroken; a record after close is dropped and counted, never a panic.
func TestAuditTornLineAndLateRecord(t *testing.T) {
	dir := t.TempDir()
	writeTrail(t, dir, 1<<20, 0, 3)
	name := dir + "/" + currentFile
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(`{"time":"2026-11-29T00:00:00Z","request_id":"torn`)
	f.Close()
	writeTrail(t, dir, 1<<20, 3, 2)
	if ids, breaks := scanIDs(t, dir); len(ids) != 5 || len(breaks) != 0 {
		t.Fatalf("after a torn line: %v, breaks %v", ids, breaks)
	}
	a, err := Open(dir, 1<<20, slog.New(slog.NewTextHandler(io.Discard, nil)), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	a.Close()
	a.Record(&Record{RequestID: "late"})
	a.Close()
}

// lastLine finds the last whole line from the file's end, through lines
// longer than its first read, and where a torn line begins.
func TestLastLine(t *testing.T) {
	name := t.TempDir() + "/f"
	long := strings.Repeat("y", 200<<10)
	for _, tc := range []struct {
		content, line string
		torn          int
	}{
		{"", "", 0},
		{"torn", "", 4},
		{"a\n", "a", 0},
		{"a\nb\n", "b", 0},
		{"a\nb\ntorn", "b", 4},
		{strings.Repeat("x\n", 50<<10) + long + "\n", long, 0},
		{long + "\n" + long + "\n" + long[:10], long, 10},
	} {
		if err := os.WriteFile(name, []byte(tc.content), 0o600); err != nil {
			t.Fatal(err)
		}
		line, end, size, err := lastLine(name)
		if err != nil || string(line) != tc.line || size-end != int64(tc.torn) || size != int64(len(tc.content)) {
			t.Errorf("%.20q: line %.20q, end %d, size %d, %v", tc.content, line, end, size, err)
		}
	}
}
