package consensus

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"
)

// journalNode is a node of the journal property test: its holder, the
// reservations under way, and what its journal has made durable.
type journalNode struct {
	name    string
	h       *BudgetHolder
	holds   []*testHold
	boots   int
	durable BudgetJournal   // the journal's state, replayed: the last boot's
	prior   []BudgetJournal // and those before it, newest first, until the last has an epoch
	kicked  bool
}

// flush writes the holder's journal record and, unless the node dies
// before it is durable, lets the holder use its ceilings.
func (n *journalNode) flush(now time.Time, commit bool) {
	j, c := n.h.Journal(false, now)
	if j.Boot != n.durable.Boot {
		if n.durable.Boot != 0 {
			n.prior = append([]BudgetJournal{n.durable}, n.prior...)
		}
		n.durable = BudgetJournal{Boot: j.Boot}
	}
	if j.Epoch != n.durable.Epoch {
		n.durable.Epoch, n.durable.Leases = j.Epoch, nil
		if j.Epoch != 0 {
			n.prior = nil
		}
	}
	for _, l := range j.Leases {
		i := -1
		for k, x := range n.durable.Leases {
			if x.Tenant == l.Tenant && x.Period == l.Period {
				i = k
			}
		}
		switch {
		case l.Gone && i >= 0:
			n.durable.Leases = append(n.durable.Leases[:i], n.durable.Leases[i+1:]...)
		case l.Gone:
		case i >= 0:
			n.durable.Leases[i] = l
		default:
			n.durable.Leases = append(n.durable.Leases, l)
		}
	}
	n.kicked = false
	if commit {
		c()
	}
}

// Random reservations, settlements, syncs, journal records and crashes
// of three nodes with journals, through the real ledger: at every crash
// what the journal made durable bounds what each lease may have spent
// (spent plus reserved), so the ledger, settling the dead boot's leases
// at those bounds, never counts less than was spent (no overspend); and
// no escrow is written off, since every node comes back with its data.
func TestJournalGivesEscrowBackAfterCrashes(t *testing.T) {
	seeds := 100
	if s := os.Getenv("LLMESH_PROPERTY_SEEDS"); s != "" {
		seeds, _ = strconv.Atoi(s)
	}
	for seed := range uint64(seeds) {
		journalRun(t, seed)
	}
}

func journalRun(t *testing.T, seed uint64) {
	r := rand.New(rand.NewPCG(seed, 77))
	now := time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)
	l := NewLedger()
	var cmdSeq int
	apply := func(_ context.Context, c Command) (Result, error) {
		c.Time = now.UnixNano()
		res := l.Apply(c)
		if err := l.Check(); err != nil {
			t.Fatalf("seed %d: after %s: %v", seed, c.Type, err)
		}
		return res, nil
	}
	admin := func(typ string, body any) {
		cmdSeq++
		c, _ := newCommand(fmt.Sprintf("admin/%d", cmdSeq), typ, body)
		if res, _ := apply(context.Background(), c); res.Err != "" {
			t.Fatal(res.Err)
		}
	}
	admin(CmdSetVersion, SetVersion{Version: VersionJournal})
	admin(CmdPutTenant, Tenant{Name: "acme", KeySHA256: []string{testHash}, Budget: &Budget{Limit: NanosPerUSD, Period: PeriodTotal}})
	var truth Nanos // spent for certain: settled costs, and holds lost in a crash at their bounds
	var nodes []*journalNode
	boot := func(n *journalNode) {
		n.boots++
		n.h = NewBudgetHolder(n.name, apply, func() map[string]bool { return map[string]bool{"acme": true} })
		n.h.Drive(func() time.Time { return now }, seed*1000+uint64(n.boots)*10+uint64(len(nodes)))
		n.h.EnableJournal(func() { n.kicked = true })
		if n.durable.Boot != 0 {
			var prior *Recovery
			for i := len(n.prior) - 1; i >= 0; i-- {
				prior = RecoveryOf(n.prior[i], nil, prior)
			}
			n.h.Recover(RecoveryOf(n.durable, nil, prior))
		}
		n.holds = nil
		n.flush(now, true) // the journal records the new boot before it syncs
	}
	for i := range 3 {
		n := &journalNode{name: fmt.Sprintf("n%d", i)}
		boot(n)
		nodes = append(nodes, n)
	}
	crashes := 0
	for range 500 {
		now = now.Add(time.Duration(5+r.IntN(100)) * time.Millisecond)
		n := nodes[r.IntN(len(nodes))]
		switch k := r.IntN(100); {
		case k < 40:
			upper := float64(1+r.IntN(200)) / 1e6
			if hold, err := n.h.TryReserve("acme", upper, now); err == nil && hold != nil {
				n.holds = append(n.holds, &testHold{h: hold, upper: upper})
			}
		case k < 65:
			if len(n.holds) > 0 {
				i := r.IntN(len(n.holds))
				th := n.holds[i]
				cost := th.upper * r.Float64()
				th.h.Settle(cost)
				truth += RoundNanos(cost)
				n.holds = append(n.holds[:i], n.holds[i+1:]...)
			}
		case k < 80:
			_ = n.h.Sync(context.Background(), false)
		case k < 96 || n.kicked:
			// A record; now and then the node dies before it is durable.
			n.flush(now, r.IntN(10) > 0)
		default:
			crashes++
			// What the journal made durable bounds what each lease of this
			// boot may have spent.
			n.h.mu.Lock()
			for _, lease := range append(n.h.leaseList(), n.h.retired...) {
				if lease.reservedCum == 0 {
					continue
				}
				var bound Nanos = -1
				for _, d := range n.durable.Leases {
					if d.Tenant == lease.tenant && d.Period == lease.period {
						bound = d.Bound()
					}
				}
				if n.durable.Epoch != n.h.epoch || bound < lease.spent+lease.inflight {
					t.Fatalf("seed %d: %s crashes with %s/%s spent %v and %v reserved, but its journal (epoch %d, this boot's %d) bounds it at %v",
						seed, n.name, lease.tenant, lease.period, lease.spent, lease.inflight, n.durable.Epoch, n.h.epoch, bound)
				}
			}
			n.h.mu.Unlock()
			for _, th := range n.holds {
				truth += CeilNanos(th.upper) // the provider may bill what died in flight
			}
			n.h.Crash()
			boot(n)
		}
	}
	// Quiet: what is under way settles at its bound, and every node
	// reports (and a node that came back gives its last boot's account).
	for _, n := range nodes {
		for _, th := range n.holds {
			th.h.Settle(th.upper)
			truth += CeilNanos(th.upper)
		}
		n.holds = nil
	}
	for range 3 {
		now = now.Add(time.Second)
		for _, n := range nodes {
			_ = n.h.Sync(context.Background(), false)
		}
	}
	b := l.s.Books["acme/total"]
	if b.Settled < truth {
		t.Fatalf("seed %d: the books settled %v, less than was spent (%v): an overspend", seed, b.Settled, truth)
	}
	if b.Forfeited != 0 {
		t.Fatalf("seed %d: %v written off after %d crashes, though every node came back with its journal", seed, b.Forfeited, crashes)
	}
}
