// Package audit is the hash-chained audit trail: one JSON line per
// routing decision for a tenant with a residency, on every node the
// request passed, so that a user can show where each request's data
// went. Lines are appended to audit.jsonl in the audit directory; at max
// size the file is renamed audit-<rotation time>.jsonl and a new one
// begun. Each line carries the SHA-256 of the line before it (across
// files), so a line removed or changed breaks the chain, which Scan (and
// `llmesh audit -verify`) checks.
//
// Requests hand records to a writer goroutine through a bounded queue:
// no request waits on the disk. A full queue drops the record, counts it
// (llmesh_audit_records_total{outcome="dropped"}) and logs an error.
//
// The package imports no project package.
package audit

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Record is one line of the audit trail.
type Record struct {
	Time      time.Time `json:"time"`
	RequestID string    `json:"request_id"`
	Node      string    `json:"node"` // the node that wrote the line
	Tenant    string    `json:"tenant"`
	Endpoint  string    `json:"endpoint,omitempty"` // the API: chat, embeddings
	Residency string    `json:"residency"`
	Strict    bool      `json:"strict_transit,omitempty"`
	// Nodes are the nodes the request passed, in order: the one the
	// client called first.
	Nodes                 []string `json:"nodes"`
	Provider              string   `json:"provider,omitempty"`
	ProviderRegion        string   `json:"provider_region,omitempty"`
	ProviderJurisdictions string   `json:"provider_jurisdictions,omitempty"`
	Status                int      `json:"status"`
	Outcome               string   `json:"outcome"`
	Error                 string   `json:"error,omitempty"` // the error code a refusal got
	// Prev is the SHA-256 of the previous line, hex; "" for the first.
	Prev string `json:"prev"`
}

const (
	currentFile = "audit.jsonl"
	queueSize   = 65536
)

// Log is an open audit trail, written by a goroutine of its own until
// Close.
type Log struct {
	dir     string
	maxSize int64
	// queue is never closed: a request cut off by a forced stop may still
	// record after close, and must not panic.
	queue   chan *Record
	log     *slog.Logger
	records *prometheus.CounterVec // outcome: written, dropped, failed
	stop    chan struct{}
	done    chan struct{}
	closed  atomic.Bool
	once    sync.Once

	// The writer goroutine's own.
	f       *os.File
	size    int64  // of the current file, up to the last whole line
	prev    string // hash of the last line written
	enc     []byte
	failing bool // the last write failed: log once per outage
}

// Open opens (creating) the audit directory and its current file,
// and finds the last line's hash to chain from. It fails at start, not on
// the first request.
func Open(dir string, maxSize int64, log *slog.Logger, reg prometheus.Registerer) (*Log, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("audit.dir: %w", err)
	}
	a := &Log{dir: dir, maxSize: maxSize, queue: make(chan *Record, queueSize), log: log,
		stop: make(chan struct{}), done: make(chan struct{}),
		records: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "llmesh_audit_records_total",
			Help: "Audit records of routing decisions for tenants with a residency: written, dropped (the queue to the disk was full) or failed (the write failed).",
		}, []string{"outcome"})}
	for _, o := range []string{"written", "dropped", "failed"} {
		a.records.WithLabelValues(o)
	}
	prev, err := chainTail(dir, log)
	if err != nil {
		return nil, fmt.Errorf("audit.dir: %w", err)
	}
	a.prev = prev
	if err := a.openCurrent(); err != nil {
		return nil, fmt.Errorf("audit.dir: %w", err)
	}
	reg.MustRegister(a.records)
	go a.run()
	return a, nil
}

func (a *Log) openCurrent() error {
	f, err := os.OpenFile(filepath.Join(a.dir, currentFile), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return err
	}
	a.f, a.size = f, st.Size()
	return nil
}

// Record queues rec; it never blocks. The nil Log records nothing.
func (a *Log) Record(rec *Record) {
	if a == nil {
		return
	}
	if a.closed.Load() {
		a.records.WithLabelValues("dropped").Inc()
		return
	}
	select {
	case a.queue <- rec:
	default:
		a.records.WithLabelValues("dropped").Inc()
		a.log.Error("audit record dropped: the audit writer cannot keep up", "request_id", rec.RequestID, "tenant", rec.Tenant)
	}
}

// run writes queued records, syncing the file after each burst, until
// stop; then it writes what is queued and closes the file.
func (a *Log) run() {
	defer close(a.done)
	for {
		select {
		case rec := <-a.queue:
			a.write(rec)
			a.drain()
			a.sync()
		case <-a.stop:
			a.drain()
			a.sync()
			_ = a.f.Close()
			return
		}
	}
}

// drain writes the records already queued.
func (a *Log) drain() {
	for {
		select {
		case rec := <-a.queue:
			a.write(rec)
		default:
			return
		}
	}
}

// write appends one record as one write(2): either the whole line is in
// the file and the chain moves on, or the file is cut back to its last
// whole line and the record counted as failed.
func (a *Log) write(rec *Record) {
	rec.Prev = a.prev
	b, err := json.Marshal(rec)
	if err != nil {
		a.records.WithLabelValues("failed").Inc()
		return
	}
	if a.size > 0 && a.size+int64(len(b))+1 > a.maxSize {
		a.rotate()
	}
	a.enc = append(append(a.enc[:0], b...), '\n')
	if k, err := a.f.Write(a.enc); err != nil {
		if k > 0 {
			_ = a.f.Truncate(a.size)
		}
		a.records.WithLabelValues("failed").Inc()
		if !a.failing {
			a.log.Error("audit records cannot be written; they are counted as failed until writes succeed again", "dir", a.dir, "err", err)
		}
		a.failing = true
		return
	}
	if a.failing {
		a.log.Info("audit records are written again", "dir", a.dir)
	}
	a.failing = false
	sum := sha256.Sum256(b)
	a.prev = hex.EncodeToString(sum[:])
	a.size += int64(len(a.enc))
	a.records.WithLabelValues("written").Inc()
}

func (a *Log) sync() {
	if err := a.f.Sync(); err != nil && !a.failing {
		a.log.Error("audit sync failed", "err", err)
	}
}

// rotate closes the current file under a name of its own and begins a new
// one; the chain goes on across the two.
func (a *Log) rotate() {
	a.sync()
	_ = a.f.Close()
	cur := filepath.Join(a.dir, currentFile)
	name := filepath.Join(a.dir, "audit-"+time.Now().UTC().Format("20060102T150405.000000000Z")+".jsonl")
	if err := os.Rename(cur, name); err != nil {
		a.log.Error("audit rotation failed", "err", err)
	}
	if err := a.openCurrent(); err != nil {
		// Nothing to write to: every later record fails and is counted
		// (a read-only file refuses writes).
		a.log.Error("audit file cannot be opened", "err", err)
		a.f, _ = os.Open(os.DevNull)
		a.size = 0
	}
}

// Close writes what is queued and closes the file, once requests have
// ended; a record after Close is dropped and counted.
func (a *Log) Close() {
	if a == nil {
		return
	}
	a.once.Do(func() {
		a.closed.Store(true)
		close(a.stop)
	})
	<-a.done
}

// chainTail returns the hash of the trail's last whole line ("" for an
// empty trail), for the next line to chain from. A last line a crash left
// without its newline was never a whole record: it is cut, or the next
// record would be glued to it. Only the files' tails are read.
func chainTail(dir string, log *slog.Logger) (string, error) {
	files, err := Files(dir)
	if err != nil {
		return "", err
	}
	for i := len(files) - 1; i >= 0; i-- {
		line, end, size, err := lastLine(files[i])
		if err != nil {
			return "", err
		}
		if end < size {
			log.Warn("audit: cut a torn last line a crash left", "file", files[i], "bytes", size-end)
			if err := os.Truncate(files[i], end); err != nil {
				return "", err
			}
		}
		if line != nil {
			sum := sha256.Sum256(line)
			return hex.EncodeToString(sum[:]), nil
		}
	}
	return "", nil
}

// lastLine returns a file's last whole line (without its newline), the
// offset just past it, and the file's size: bytes from end to size are a
// torn line. It reads back from the end only as far as it must.
func lastLine(name string) (line []byte, end, size int64, err error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, 0, 0, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, 0, 0, err
	}
	size = st.Size()
	var tail []byte // the file from off to size
	for off, chunk := size, int64(64<<10); ; chunk *= 2 {
		from := max(0, off-chunk)
		part := make([]byte, off-from, int64(len(tail))+off-from)
		if _, err := f.ReadAt(part, from); err != nil {
			return nil, 0, 0, err
		}
		tail, off = append(part, tail...), from
		if e := bytes.LastIndexByte(tail, '\n'); e >= 0 {
			if start := bytes.LastIndexByte(tail[:e], '\n'); start >= 0 || off == 0 {
				return tail[start+1 : e], off + int64(e) + 1, size, nil
			}
		} else if off == 0 {
			return nil, 0, size, nil
		}
	}
}
