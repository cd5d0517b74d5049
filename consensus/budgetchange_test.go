package consensus

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"
)

// budgetWorld is the real ledger and several nodes' budget holders
// driven in virtual time, with what the test knows for certain: every
// reservation still in flight, at its upper bound.
type budgetWorld struct {
	t     *testing.T
	seed  uint64
	r     *rand.Rand
	now   time.Time
	l     *Ledger
	nodes []*budgetNode
	seq   int
	// bound is, per books, the most they may settle: their limit in
	// force, or what they had settled when it was set if that was
	// more, plus what was in flight when it was set.
	bound map[string]Nanos
	log   []string
}

type budgetNode struct {
	name  string
	boots int
	h     *BudgetHolder
	holds []*testHold
}

type testHold struct {
	h     *Hold
	upper float64
}

func newBudgetWorld(t *testing.T, seed uint64, nodes int) *budgetWorld {
	w := &budgetWorld{t: t, seed: seed, r: rand.New(rand.NewPCG(seed, 33)), now: time.Date(2026, 12, 5, 23, 0, 0, 0, time.UTC),
		l: NewLedger(), bound: map[string]Nanos{}}
	w.cmd(CmdSetVersion, SetVersion{Version: VersionBudgetRevisions})
	w.cmd(CmdPutTenant, Tenant{Name: "acme", KeySHA256: []string{testHash}, Budget: &Budget{Limit: NanosPerUSD / 100, Period: PeriodDay}})
	w.bound["acme/"+w.period(PeriodDay)] = NanosPerUSD / 100
	for i := range nodes {
		n := &budgetNode{name: fmt.Sprintf("n%d", i)}
		w.boot(n)
		w.nodes = append(w.nodes, n)
	}
	return w
}

const testHash = "0000000000000000000000000000000000000000000000000000000000000001"

func (w *budgetWorld) period(p string) string {
	s, _ := periodOf(w.now.UnixNano(), p)
	return s
}

// apply is the ledger as a leader would answer: stamped with the
// virtual clock, its invariants checked after every command.
func (w *budgetWorld) apply(_ context.Context, c Command) (Result, error) {
	c.Time = w.now.UnixNano()
	r := w.l.Apply(c)
	if err := w.l.Check(); err != nil {
		w.t.Fatalf("after %s %s: %v\n%s", c.Type, c.Body, err, w.history())
	}
	return r, nil
}

func (w *budgetWorld) cmd(typ string, body any) Result {
	w.seq++
	b, _ := json.Marshal(body)
	r, _ := w.apply(context.Background(), Command{ID: fmt.Sprintf("test/%d", w.seq), Type: typ, Body: b})
	if r.Err != "" {
		w.t.Fatalf("%s: %s", typ, r.Err)
	}
	return r
}

func (w *budgetWorld) boot(n *budgetNode) {
	n.boots++
	n.h = NewBudgetHolder(n.name, w.apply, func() map[string]bool {
		t := w.l.s.Tenants["acme"]
		return map[string]bool{"acme": t != nil && t.Budget != nil}
	})
	n.h.Drive(func() time.Time { return w.now }, uint64(n.boots)*1000+uint64(len(n.name)))
	n.holds = nil
	n.h.SetRevs(w.revs())
}

// revs are the accounts' budget revisions as a node reads them.
func (w *budgetWorld) revs() map[string]int64 {
	out := map[string]int64{}
	if b := w.l.s.Tenants["acme"].Budget; b != nil {
		out["acme"] = b.Rev
	}
	return out
}

// inflight is what may still be spent that the ledger does not know of:
// reservations under way, and the escrow of a node that crashed (until
// its next boot's first sync writes it off), which it may have spent.
func (w *budgetWorld) inflight() (sum Nanos) {
	for _, n := range w.nodes {
		for _, h := range n.holds {
			sum += CeilNanos(h.upper)
		}
		for _, b := range w.l.s.Books {
			if le := b.Leases[n.name]; le != nil && le.Epoch != n.h.epoch {
				sum += le.Reserved()
			}
		}
	}
	return sum
}

func (w *budgetWorld) syncAll() {
	for _, n := range w.nodes {
		_ = n.h.Sync(context.Background(), false)
	}
}

func (w *budgetWorld) history() string {
	from := max(len(w.log)-40, 0)
	out := ""
	for _, l := range w.log[from:] {
		out += l + "\n"
	}
	return out
}

// step does one random thing.
func (w *budgetWorld) step() {
	w.now = w.now.Add(time.Duration(20+w.r.IntN(300)) * time.Millisecond)
	n := w.nodes[w.r.IntN(len(w.nodes))]
	switch k := w.r.IntN(100); {
	case k < 40: // a request reserves its upper bound
		upper := float64(1+w.r.IntN(40)) / 1e6 // $0.000001-0.00004
		hold, err := n.h.TryReserve("acme", upper, w.now)
		if err == nil && hold != nil {
			n.holds = append(n.holds, &testHold{h: hold, upper: upper})
		}
	case k < 70: // one settles at its actual cost, at most its bound
		if len(n.holds) > 0 {
			i := w.r.IntN(len(n.holds))
			th := n.holds[i]
			th.h.Settle(th.upper * w.r.Float64())
			n.holds = append(n.holds[:i], n.holds[i+1:]...)
		}
	case k < 90:
		_ = n.h.Sync(context.Background(), false)
	case k < 97:
		w.change()
	default: // the node crashes and restarts: its reservations die with it
		w.log = append(w.log, fmt.Sprintf("%s: %s restarts", w.now.Format("15:04:05.000"), n.name))
		n.h.Crash()
		w.boot(n)
	}
}

// change sets a random budget (or none), tells every node at once, as
// each does within a second of reading the ledger, and sets the bound of
// the books now in force.
func (w *budgetWorld) change() {
	var b *Budget
	if w.r.IntN(6) > 0 {
		b = &Budget{Limit: Nanos(1+w.r.IntN(200)) * NanosPerUSD / 1e6 * 10, Period: []string{PeriodDay, PeriodMonth, PeriodTotal}[w.r.IntN(3)]}
	}
	inflight := w.inflight()
	w.cmd(CmdSetBudget, map[string]any{"tenant": "acme", "budget": b})
	w.log = append(w.log, fmt.Sprintf("%s: budget %+v, %v in flight", w.now.Format("15:04:05.000"), b, inflight))
	for _, n := range w.nodes {
		n.h.SetRevs(w.revs())
	}
	w.syncAll() // what was spent before the change is reported as such
	if b != nil {
		k := "acme/" + w.period(b.Period)
		w.bound[k] = max(b.Limit, w.l.s.Books[k].Settled) + inflight
	}
}

// check asserts that no books settled more than their bound.
func (w *budgetWorld) check() {
	for k, b := range w.l.s.Books {
		bound, ok := w.bound[k]
		if !ok {
			bound = b.Limit // a new period opened at the budget in force
		}
		if b.Settled > bound {
			w.t.Fatalf("seed %d: books %s settled %v, more than the limit in force and what was in flight at its change (%v); books %+v\n%s",
				w.seed, k, b.Settled, bound, *b, w.history())
		}
	}
}

// Random sequences of budget changes (amount, period, removal), spend and
// node restarts, through the real ledger and holders: what any period's
// books settle never exceeds the limit in force plus what was in flight
// when it was set, the escrow invariants hold after every command, and
// once the changes stop the budget can still be spent.
func TestBudgetChangesNeverOverspend(t *testing.T) {
	seeds := 200
	if s := os.Getenv("LLMESH_PROPERTY_SEEDS"); s != "" {
		seeds, _ = strconv.Atoi(s)
	}
	if testing.Short() {
		seeds = 40
	}
	for seed := range uint64(seeds) {
		w := newBudgetWorld(t, seed, 3)
		for range 400 {
			w.step()
			w.check()
		}
		// Quiet: every reservation settles at its bound, and the nodes
		// report it.
		for _, n := range w.nodes {
			for _, th := range n.holds {
				th.h.Settle(th.upper)
			}
			n.holds = nil
		}
		for range 3 {
			w.now = w.now.Add(time.Second)
			w.syncAll()
		}
		w.check()
	}
}
