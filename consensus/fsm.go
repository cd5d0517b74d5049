package consensus

import (
	"encoding/json"
	"fmt"
	"io"
	"sync"

	"github.com/hashicorp/raft"
)

// FSM adapts the Ledger to raft.FSM: it decodes log entries, serializes
// access, and snapshots. Reads of the ledger go through Read.
type FSM struct {
	mu sync.RWMutex
	l  *Ledger
	// afterApply, if set, is called (under the lock) after each command:
	// tests check the escrow invariant there after every apply.
	afterApply func(*Ledger, Command, Result)
	// versionAhead, if set, is told (under the lock) the ledger's
	// version when a restore or a set_version leaves it above
	// LedgerVersion: this build must be upgraded.
	versionAhead func(int)
}

var _ raft.FSM = (*FSM)(nil)

// NewFSM returns an FSM over an empty ledger.
func NewFSM() *FSM { return &FSM{l: NewLedger()} }

// Apply implements raft.FSM. It returns a Result; a log entry that does not
// decode is an error result, not a panic.
func (f *FSM) Apply(log *raft.Log) any {
	var cmd Command
	if err := json.Unmarshal(log.Data, &cmd); err != nil {
		return Result{Err: fmt.Sprintf("undecodable command at index %d: %v", log.Index, err)}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	r := f.l.Apply(cmd)
	if v := f.l.Version(); cmd.Type == CmdSetVersion && v > LedgerVersion && f.versionAhead != nil {
		f.versionAhead(v)
	}
	if f.afterApply != nil {
		f.afterApply(f.l, cmd, r)
	}
	return r
}

// Read runs fn with the ledger under a read lock. fn must not keep
// references into it.
func (f *FSM) Read(fn func(*Ledger)) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	fn(f.l)
}

// Snapshot implements raft.FSM: the state is encoded at once, under the
// lock, and written out later.
func (f *FSM) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	b, err := f.l.Snapshot()
	if err != nil {
		return nil, err
	}
	return snapshot(b), nil
}

// Restore implements raft.FSM.
func (f *FSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.l.Restore(b); err != nil {
		return err
	}
	if v := f.l.Version(); v > LedgerVersion && f.versionAhead != nil {
		f.versionAhead(v)
	}
	return nil
}

type snapshot []byte

func (s snapshot) Persist(sink raft.SnapshotSink) error {
	if _, err := sink.Write(s); err != nil {
		_ = sink.Cancel()
		return err
	}
	return sink.Close()
}

func (s snapshot) Release() {}
