// Package lincheck is a sequential model of what the ledger promises
// clients of its admin API, and a recorder of concurrent histories to
// check against it with porcupine (github.com/anishathalye/porcupine):
// that every admin write (a budget, a tenant's limits, a key's settings)
// and every linearizable read behaves as if applied one at a time, at
// some instant between its call and its answer, whatever fails in
// between; and that what a tenant's books have settled, read
// linearizably, never goes back.
//
// The model is a set of independent objects, each named by a key:
//
//   - a register ("budget:lin", "limits:lin", "key:lin/ID"): a write sets
//     its value, a read returns the last value written;
//   - a counter that only grows ("settled:acme"): the spend settled into
//     a tenant's books, written by the nodes' syncs, which a client never
//     sees call or return; a read returns at least what any read
//     linearized before it returned.
//
// A write whose answer was lost (a timeout, a node killed under it) may
// or may not have happened: it is recorded as pending forever, and the
// checker may place it anywhere after its call, or nowhere. A read that
// failed tells nothing and is not recorded.
//
// lincheck imports no project package.
package lincheck

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"
)

// Input is one operation's call.
type Input struct {
	Write bool
	Key   string
	Value string // what a write sets
}

// Output is one operation's answer: what a read returned; Unknown for a
// write whose answer was lost.
type Output struct {
	Value   string
	Unknown bool
}

// counter reports whether key names a counter that only grows (its
// prefix is "settled:"), not a register.
func counter(key string) bool { return strings.HasPrefix(key, "settled:") }

// Model is the ledger's admin state and books as porcupine checks them,
// partitioned by key.
var Model = porcupine.Model{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byKey := map[string][]porcupine.Operation{}
		var keys []string
		for _, op := range history {
			k := op.Input.(Input).Key
			if _, ok := byKey[k]; !ok {
				keys = append(keys, k)
			}
			byKey[k] = append(byKey[k], op)
		}
		out := make([][]porcupine.Operation, 0, len(keys))
		for _, k := range keys {
			out = append(out, byKey[k])
		}
		return out
	},
	// A register's state is its value ("" before the first write); a
	// counter's the least it may hold, as a decimal.
	Init: func() any { return "" },
	Step: func(state, input, output any) (bool, any) {
		in, out, st := input.(Input), output.(Output), state.(string)
		switch {
		case in.Write && counter(in.Key):
			return false, st // nothing writes a counter through the admin API
		case in.Write:
			return true, in.Value // a lost answer is a write that happened here
		case counter(in.Key):
			v, err := strconv.ParseFloat(out.Value, 64)
			least, _ := strconv.ParseFloat(st, 64)
			if err != nil || v < least {
				return false, st
			}
			return true, out.Value
		}
		return out.Value == st, st
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(Input), output.(Output)
		switch {
		case in.Write && out.Unknown:
			return fmt.Sprintf("set %s %s (answer lost)", in.Key, in.Value)
		case in.Write:
			return fmt.Sprintf("set %s %s", in.Key, in.Value)
		}
		return fmt.Sprintf("get %s → %s", in.Key, out.Value)
	},
}

// History records concurrent operations as they are called and answered.
type History struct {
	start time.Time
	mu    sync.Mutex
	ops   []porcupine.Operation
}

// NewHistory starts an empty history.
func NewHistory() *History { return &History{start: time.Now()} }

// Op is an operation under way.
type Op struct {
	h    *History
	op   porcupine.Operation
	done bool
}

// Call records client's call of in, now.
func (h *History) Call(client int, in Input) *Op {
	return &Op{h: h, op: porcupine.Operation{ClientId: client, Input: in, Call: int64(time.Since(h.start))}}
}

// Return records the answer out, now.
func (o *Op) Return(out Output) {
	o.op.Output, o.op.Return = out, int64(time.Since(o.h.start))
	o.record()
}

// Lost records a write whose answer was lost: it may have happened at
// any time after its call, or never.
func (o *Op) Lost() {
	o.op.Output, o.op.Return = Output{Unknown: true}, math.MaxInt64
	o.record()
}

func (o *Op) record() {
	if o.done {
		return
	}
	o.done = true
	o.h.mu.Lock()
	defer o.h.mu.Unlock()
	o.h.ops = append(o.h.ops, o.op)
}

// Len is how many operations were recorded.
func (h *History) Len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.ops)
}

// Check checks the history against Model within timeout. It returns nil
// when the history is linearizable; otherwise an error, and, when dir is
// not empty, writes porcupine's visualization of it there (the error
// names the file). A check that ran out of time is an error too.
func (h *History) Check(timeout time.Duration, dir string) error {
	h.mu.Lock()
	ops := append([]porcupine.Operation(nil), h.ops...)
	h.mu.Unlock()
	res, info := porcupine.CheckOperationsVerbose(Model, ops, timeout)
	switch res {
	case porcupine.Ok:
		return nil
	case porcupine.Unknown:
		return fmt.Errorf("lincheck: %d operations not checked within %v", len(ops), timeout)
	}
	err := fmt.Errorf("lincheck: the history of %d operations is not linearizable", len(ops))
	if dir != "" {
		path := filepath.Join(dir, "linearizability.html")
		if f, ferr := os.Create(path); ferr == nil {
			if porcupine.Visualize(Model, info, f) == nil {
				err = fmt.Errorf("%w (see %s)", err, path)
			}
			f.Close()
		}
	}
	return err
}
