package node

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// The audit trail: one JSON line per routing decision for a tenant with a
// residency, on every node the request passed, so that a user can show
// where each request's data went. Lines are appended to audit.jsonl in
// the audit directory; at max size the file is renamed
// audit-<first-record-time>.jsonl and a new one begun. Each line carries
// the SHA-256 of the line before it (across files), so a line removed or
// changed breaks the chain, which `llmesh audit -verify` checks.
//
// Requests hand records to a writer goroutine through a bounded queue:
// no request waits on the disk. A full queue drops the record, counts it
// (llmesh_audit_records_total{outcome="dropped"}) and logs an error.

// AuditRecord is one line of the audit trail.
type AuditRecord struct {
	Time      time.Time `json:"time"`
	RequestID string    `json:"request_id"`
	Node      string    `json:"node"` // the node that wrote the line
	Tenant    string    `json:"tenant"`
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
	auditFile  = "audit.jsonl"
	auditQueue = 65536
)

type auditLog struct {
	dir     string
	maxSize int64
	queue   chan *AuditRecord
	log     *slog.Logger
	records *prometheus.CounterVec // outcome: written, dropped, failed
	done    chan struct{}
	once    sync.Once

	// The writer goroutine's own.
	f    *os.File
	w    *bufio.Writer
	size int64
	prev string
	enc  []byte
}

// openAudit opens (creating) the audit directory and its current file,
// and finds the last line's hash to chain from. It fails at start, not on
// the first request.
func openAudit(dir string, maxSize int64, log *slog.Logger, reg prometheus.Registerer) (*auditLog, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("audit.dir: %w", err)
	}
	a := &auditLog{dir: dir, maxSize: maxSize, queue: make(chan *AuditRecord, auditQueue), log: log, done: make(chan struct{}),
		records: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "llmesh_audit_records_total",
			Help: "Audit records of routing decisions for tenants with a residency: written, dropped (the queue to the disk was full) or failed (the write failed).",
		}, []string{"outcome"})}
	for _, o := range []string{"written", "dropped", "failed"} {
		a.records.WithLabelValues(o)
	}
	prev, err := lastHash(dir)
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

func (a *auditLog) openCurrent() error {
	f, err := os.OpenFile(filepath.Join(a.dir, auditFile), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return err
	}
	a.f, a.w, a.size = f, bufio.NewWriterSize(f, 64<<10), st.Size()
	return nil
}

// record queues rec; it never blocks.
func (a *auditLog) record(rec *AuditRecord) {
	if a == nil {
		return
	}
	select {
	case a.queue <- rec:
	default:
		a.records.WithLabelValues("dropped").Inc()
		a.log.Error("audit record dropped: the audit writer cannot keep up", "request_id", rec.RequestID, "tenant", rec.Tenant)
	}
}

// run writes queued records, flushing and syncing after each burst.
func (a *auditLog) run() {
	defer close(a.done)
	for rec := range a.queue {
		a.write(rec)
		for more := true; more; {
			select {
			case r, ok := <-a.queue:
				if !ok {
					more = false
					break
				}
				a.write(r)
			default:
				more = false
			}
		}
		a.sync()
	}
	a.sync()
	_ = a.f.Close()
}

func (a *auditLog) write(rec *AuditRecord) {
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
	if _, err := a.w.Write(a.enc); err != nil {
		a.records.WithLabelValues("failed").Inc()
		a.log.Error("audit write failed", "err", err)
		return
	}
	sum := sha256.Sum256(b)
	a.prev = hex.EncodeToString(sum[:])
	a.size += int64(len(a.enc))
	a.records.WithLabelValues("written").Inc()
}

func (a *auditLog) sync() {
	if err := a.w.Flush(); err != nil {
		a.log.Error("audit flush failed", "err", err)
	}
	if err := a.f.Sync(); err != nil {
		a.log.Error("audit sync failed", "err", err)
	}
}

// rotate closes the current file under a name of its own and begins a new
// one; the chain goes on across the two.
func (a *auditLog) rotate() {
	a.sync()
	_ = a.f.Close()
	cur := filepath.Join(a.dir, auditFile)
	name := filepath.Join(a.dir, "audit-"+time.Now().UTC().Format("20060102T150405.000000000Z")+".jsonl")
	if err := os.Rename(cur, name); err != nil {
		a.log.Error("audit rotation failed", "err", err)
	}
	if err := a.openCurrent(); err != nil {
		// Nothing to write to: every later record fails and is counted.
		a.log.Error("audit file cannot be opened", "err", err)
		a.f, _ = os.Open(os.DevNull)
		a.w = bufio.NewWriter(failWriter{err})
	}
}

type failWriter struct{ err error }

func (w failWriter) Write([]byte) (int, error) { return 0, w.err }

// close writes what is queued and closes the file. Requests have ended.
func (a *auditLog) close() {
	if a == nil {
		return
	}
	a.once.Do(func() { close(a.queue) })
	<-a.done
}

// AuditFiles returns the audit directory's files, oldest first (the
// rotated ones by name, then the current one).
func AuditFiles(dir string) ([]string, error) {
	rotated, err := filepath.Glob(filepath.Join(dir, "audit-*.jsonl"))
	if err != nil {
		return nil, err
	}
	slices.Sort(rotated)
	cur := filepath.Join(dir, auditFile)
	if _, err := os.Stat(cur); err == nil {
		rotated = append(rotated, cur)
	}
	return rotated, nil
}

// lastHash is the hash of the trail's last line, "" for an empty trail.
func lastHash(dir string) (string, error) {
	files, err := AuditFiles(dir)
	if err != nil {
		return "", err
	}
	for i := len(files) - 1; i >= 0; i-- {
		b, err := os.ReadFile(files[i])
		if err != nil {
			return "", err
		}
		lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
		if last := lines[len(lines)-1]; last != "" {
			sum := sha256.Sum256([]byte(last))
			return hex.EncodeToString(sum[:]), nil
		}
	}
	return "", nil
}

// auditDecision records a finished request whose data had to stay in a
// jurisdiction (the tenant's residency, or one a request narrowed to):
// the nodes it passed and the provider that saw its data.
func (n *Node) auditDecision(e *decision) {
	if n.audit == nil || !e.residency.Restricted() {
		return
	}
	rec := &AuditRecord{Time: e.at.UTC(), RequestID: e.id, Node: n.s.name, Tenant: e.tenant, Residency: string(e.residency.Jurisdiction),
		Strict: e.strict, Status: e.status, Outcome: outcome(e.status, e.res)}
	if e.origin != "" {
		rec.Nodes = append(rec.Nodes, e.origin)
	}
	rec.Nodes = append(rec.Nodes, n.s.name)
	if r := e.res; r != nil && r.Target != nil {
		if r.Target.Via != "" {
			rec.Nodes = append(rec.Nodes, r.Target.Via)
		}
		rec.Provider = e.provider
		if p := n.catalog().Provider(e.provider); p != nil {
			rec.ProviderRegion, rec.ProviderJurisdictions = p.Region, p.Jurisdictions.String()
		}
	}
	if e.err != nil {
		_, ae := classify(e.err)
		rec.Error = ae.Code
	}
	n.audit.record(rec)
}

// AuditBreak is a place where the trail's hash chain does not hold: a
// line was removed, changed or put in between.
type AuditBreak struct {
	File string
	Line int
}

func (b AuditBreak) Error() string {
	return fmt.Sprintf("%s line %d: the audit chain breaks here (a line before it was removed or changed, or this one was)", b.File, b.Line)
}

// ScanAudit reads the trail in dir, oldest first, and calls fn with each
// record. It returns where the hash chain breaks, if it does, or the
// first error reading the files or from fn. Whole files removed from the
// start of the trail (retention) are not a break.
func ScanAudit(dir string, fn func(AuditRecord) error) ([]AuditBreak, error) {
	files, err := AuditFiles(dir)
	if err != nil {
		return nil, err
	}
	var breaks []AuditBreak
	prev := ""
	for _, name := range files {
		f, err := os.Open(name)
		if err != nil {
			return breaks, err
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
		for line := 1; sc.Scan(); line++ {
			var rec AuditRecord
			if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
				breaks = append(breaks, AuditBreak{File: name, Line: line})
				prev = ""
				continue
			}
			// The oldest line left may follow files removed for retention.
			if oldest := name == files[0] && line == 1; rec.Prev != prev && !oldest {
				breaks = append(breaks, AuditBreak{File: name, Line: line})
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
