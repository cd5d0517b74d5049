// Package journal is a node's spend journal: a file in its data
// directory where, off the request path and in batches, the node keeps
// what it must not forget in a crash (DESIGN in docs/architecture.md,
// "A local spend journal"):
//
//   - each budget lease's spend and the ceiling its reservations may
//     reach, so that a node restarted with its data tells the ledger
//     what it may have spent, and the ledger takes back the rest of its
//     escrow at once instead of writing it all off;
//   - the spend tally's reports the ledger has not acknowledged, so that
//     spend attributed by key and tag survives the crash;
//   - what each rate share sent in the last window, and the ceiling its
//     takes may reach, so that the restarted node goes on as the same
//     rate holder and its share comes back within seconds, not after a
//     lease and a window.
//
// A writer goroutine appends a record every Flush (100 ms) when anything
// changed, or at once when a reservation waits for a ceiling, fsyncs it,
// and only then lets the holders use the ceilings it holds: a request
// never waits on the disk unless it outruns them. Records are framed
// with their length and a CRC-32C: a record torn by the crash ends the
// replay; any other damage makes the journal unusable (the ledger then
// writes the last boot's escrow off, as without a journal). The file is
// compacted into one record of the whole state past maxBytes, and locked
// against a second process.
//
// journal imports consensus (the holders' journal types) and nothing
// else of the project.
package journal

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/llmesh/llmesh/consensus"
)

// Holders are what the journal keeps: the budget holder, the rate
// holders by name, the spend tally, and the rate holders' boot.
type Holders struct {
	Budgets  *consensus.BudgetHolder
	Rates    map[string]*consensus.RateHolder
	Spend    *consensus.SpendTally
	RateBoot int64
}

// Config is a journal's place and pace.
type Config struct {
	// Dir holds the journal file (spend.journal).
	Dir string
	// Flush is the longest a change waits to be written; 0: DefaultFlush.
	Flush time.Duration
	// MaxBytes is the file's size past which it is compacted; 0:
	// DefaultMaxBytes.
	MaxBytes int64
	Log      *slog.Logger
	// Now is the clock; nil: time.Now.
	Now func() time.Time
}

// Defaults.
const (
	DefaultFlush    = 100 * time.Millisecond
	DefaultMaxBytes = 4 << 20
	fileName        = "spend.journal"
)

// Journal is an open spend journal.
type Journal struct {
	cfg  Config
	f    *os.File
	size int64
	h    Holders
	kick chan struct{}
	// state is what the file holds, kept as records are written so that
	// a compaction need not read the file back.
	state State

	mu     sync.Mutex // the file: the writer, a compaction, Close
	closed bool
	// dirty means a write failed: the file may hold part of a record
	// past size, cut off before the next.
	dirty bool
	// compacted is the size of the last compaction's record: a state
	// larger than MaxBytes is compacted again only once the file has
	// doubled it, not at every record.
	compacted int64
	// spendWritten is the tally's state as last written.
	spendWritten []consensus.SpendReport
	cancel       context.CancelFunc
	done         chan struct{}
}

// Open opens (creating it and its directory if needed) and locks the
// journal in cfg.Dir, and returns it with the state it held: what the
// node's holders recover before they start. A journal another process
// holds open, or one damaged anywhere but in its last record, is an
// error naming the file.
func Open(cfg Config) (*Journal, *State, error) {
	if cfg.Flush <= 0 {
		cfg.Flush = DefaultFlush
	}
	if cfg.MaxBytes <= 0 {
		cfg.MaxBytes = DefaultMaxBytes
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, nil, fmt.Errorf("spend journal: %w", err)
	}
	path := filepath.Join(cfg.Dir, fileName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, nil, fmt.Errorf("spend journal: %w", err)
	}
	if err := lock(f); err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("spend journal %s: another process holds it (%w): is a node already running on this data_dir?", path, err)
	}
	st, good, err := replay(f)
	if err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("spend journal %s: %w", path, err)
	}
	// A record torn by a crash is cut off, so that what follows it is
	// read.
	if err := f.Truncate(good); err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("spend journal %s: %w", path, err)
	}
	if _, err := f.Seek(good, 0); err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("spend journal %s: %w", path, err)
	}
	j := &Journal{cfg: cfg, f: f, size: good, state: *st, kick: make(chan struct{}, 1)}
	return j, st, nil
}

// Kick asks for a record now; it never blocks.
func (j *Journal) Kick() {
	select {
	case j.kick <- struct{}{}:
	default:
	}
}

// Start has the journal keep h from now on: the holders take only within
// the ceilings it writes. Its first record, written before it returns
// (before the holders first sync), names this boot: a crash after that
// sync is then known to the next boot's recovery. It writes every
// Flush, or on Kick, until Stop or Kill.
//
// The holders wait on a journal that cannot write (the disk is full, say),
// as they wait on a ledger they cannot reach: the writer tries again
// every Flush.
func (j *Journal) Start(h Holders) {
	j.h = h
	h.Budgets.EnableJournal(j.Kick)
	for _, r := range h.Rates {
		r.EnableJournal(j.Kick)
	}
	if err := j.Flush(); err != nil {
		j.cfg.Log.Error("spend journal: its first record was not written; the holders wait for one", "err", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	j.cancel, j.done = cancel, make(chan struct{})
	go j.run(ctx)
}

func (j *Journal) run(ctx context.Context) {
	defer close(j.done)
	t := time.NewTicker(j.cfg.Flush)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-j.kick:
		}
		if err := j.Flush(); err != nil {
			j.cfg.Log.Error("spend journal: a record was not written; the holders wait for the next", "err", err)
		}
	}
}

// Flush writes a record of what changed since the last, if anything
// did, and makes it durable before the holders may use its ceilings.
func (j *Journal) Flush() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.closed {
		return errors.New("the journal is closed")
	}
	now := j.cfg.Now()
	rec := Record{Time: now.UnixNano(), RateBoot: j.h.RateBoot}
	var commits []func()
	bj, commit := j.h.Budgets.Journal(false, now)
	rec.Budget, commits = bj, append(commits, commit)
	changed := len(bj.Leases) > 0 || bj.Boot != j.state.Budget.Boot || bj.Epoch != j.state.Budget.Epoch ||
		rec.RateBoot != j.state.RateBoot
	for name, h := range j.h.Rates {
		rj, commit := h.Journal(false, now)
		commits = append(commits, commit)
		// Its renewals' number too, however idle its shares: a restarted
		// node numbers its renewals above it.
		if rs := j.state.Rates[name]; len(rj.Shares) > 0 || rj.Seq > 0 && (rs == nil || rs.Seq != rj.Seq) {
			if rec.Rates == nil {
				rec.Rates = map[string]consensus.RateJournal{}
			}
			rec.Rates[name] = rj
			changed = true
		}
	}
	if j.h.Spend != nil {
		if sp := j.h.Spend.Journal(); !spendEqual(sp, j.spendWritten) {
			rec.Spend, changed = sp, true
			if rec.Spend == nil {
				rec.Spend = []consensus.SpendReport{} // all acknowledged: none left
			}
		}
	}
	if !changed {
		for _, c := range commits {
			c()
		}
		return nil
	}
	if err := j.append(&rec); err != nil {
		return err
	}
	if rec.Spend != nil {
		j.spendWritten = rec.Spend
	}
	j.state.apply(&rec)
	for _, c := range commits {
		c()
	}
	if j.size > max(j.cfg.MaxBytes, 2*j.compacted) {
		if err := j.compact(); err != nil {
			j.cfg.Log.Warn("spend journal: compaction failed; the file grows", "err", err)
		}
	}
	return nil
}

func spendEqual(a, b []consensus.SpendReport) bool {
	if len(a) != len(b) {
		return false
	}
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}

// append writes rec and fsyncs. A write or fsync that fails leaves the
// file as it was before it (what it wrote in part is cut off before the
// next record): records written after a partial one would make the
// journal read as damaged, and the node unable to start.
func (j *Journal) append(rec *Record) error {
	b, err := frame(rec)
	if err != nil {
		return err
	}
	if j.dirty {
		if err := j.cutBack(); err != nil {
			return err
		}
	}
	if _, err := j.f.Write(b); err != nil {
		j.dirty = true
		_ = j.cutBack()
		return err
	}
	if err := j.f.Sync(); err != nil {
		j.dirty = true
		_ = j.cutBack()
		return err
	}
	j.size += int64(len(b))
	return nil
}

// cutBack truncates the file to the records written whole.
func (j *Journal) cutBack() error {
	if err := j.f.Truncate(j.size); err != nil {
		return err
	}
	if _, err := j.f.Seek(j.size, io.SeekStart); err != nil {
		return err
	}
	j.dirty = false
	return nil
}

// compact rewrites the journal as one record of the whole state: a new
// file, fsynced, renamed over the old one.
func (j *Journal) compact() error {
	st := j.state
	b, err := frame(&Record{Time: st.Time, Full: &st, Budget: st.Budget})
	if err != nil {
		return err
	}
	dir := j.cfg.Dir
	tmp, err := os.CreateTemp(dir, fileName+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := lock(tmp); err != nil {
		tmp.Close()
		return err
	}
	if err := os.Rename(tmp.Name(), filepath.Join(dir, fileName)); err != nil {
		tmp.Close()
		return err
	}
	syncDir(dir)
	j.f.Close()
	j.f, j.size, j.compacted = tmp, int64(len(b)), int64(len(b))
	return nil
}

// Stop writes a last record (what the holders gave back at their last
// sync) and closes the journal.
func (j *Journal) Stop() {
	if j.cancel != nil {
		j.cancel()
		<-j.done
	}
	if err := j.Flush(); err != nil && !errors.Is(err, os.ErrClosed) {
		j.cfg.Log.Warn("spend journal: the last record was not written", "err", err)
	}
	j.close()
}

// Kill stops at once, as a crash would: nothing more is written.
func (j *Journal) Kill() {
	if j.cancel != nil {
		j.cancel()
		<-j.done
	}
	j.close()
}

func (j *Journal) close() {
	j.mu.Lock()
	defer j.mu.Unlock()
	if !j.closed {
		j.closed = true
		j.f.Close()
	}
}
