package consensus

import (
	"slices"
	"strings"
	"sync"
)

// SpendTally is a node's charges not yet acknowledged by the ledger: the
// request path adds each settled cost (Charge, under a mutex and nothing
// else), and each of the budget holder's syncs seals what was charged
// since the last into a numbered SpendReport and sends it with every
// report not yet acknowledged, unchanged, until the ledger says it
// applied them (SyncResult.SpendSeq). At most maxUnacked reports wait
// so; charges made meanwhile wait to be sealed. Every tenant's charges
// are tallied, budgeted or not.
//
// What it holds is bounded as the ledger's books are: per tenant and
// dimension SpendCap distinct values, the rest under SpendOther.
type SpendTally struct {
	mu   sync.Mutex
	open map[string]*tenantTally // by tenant
	sent []SpendReport           // sealed and not acknowledged, oldest first
	seq  uint64
}

// maxUnacked bounds the reports a tally keeps sending while the ledger
// does not acknowledge them (it is unreachable): charges made meanwhile
// accumulate in one open report, itself bounded.
const maxUnacked = 4

type tenantTally struct {
	total SpendAmount
	cells map[spendCell]SpendAmount
	// values counts the distinct values of each dimension (spendDims'
	// order) held.
	values [4]int
}

type spendCell struct {
	dim   uint8 // index in spendDims
	value string
}

// NewSpendTally returns an empty tally.
func NewSpendTally() *SpendTally { return &SpendTally{open: map[string]*tenantTally{}} }

// Charge tallies one settled cost of usd for tenant, under its key id,
// tag set, model and provider.
func (t *SpendTally) Charge(tenant, key, tags, model, provider string, usd float64) {
	a := SpendAmount{Nanos: RoundNanos(usd), Requests: 1}
	t.mu.Lock()
	defer t.mu.Unlock()
	tt := t.open[tenant]
	if tt == nil {
		tt = &tenantTally{cells: map[spendCell]SpendAmount{}}
		t.open[tenant] = tt
	}
	tt.total.add(a)
	for i, v := range [...]string{key, tags, model, provider} {
		c := spendCell{uint8(i), v}
		cur, ok := tt.cells[c]
		if !ok && tt.values[i] >= SpendCap {
			c.value = SpendOther
			cur, ok = tt.cells[c]
		}
		if !ok {
			tt.values[i]++
		}
		cur.add(a)
		tt.cells[c] = cur
	}
}

// Pending reports whether there is something to report.
func (t *SpendTally) Pending() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.sent) > 0 || len(t.open) > 0
}

// Reports returns the reports to send, oldest first: those sent before
// and not acknowledged, and what was charged since, sealed as a new one
// (while fewer than maxUnacked wait); nil when there is nothing.
func (t *SpendTally) Reports() []SpendReport {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.open) > 0 && len(t.sent) < maxUnacked {
		t.sent = append(t.sent, t.sealLocked())
	}
	return slices.Clone(t.sent)
}

// sealLocked turns the open charges into the next report.
func (t *SpendTally) sealLocked() SpendReport {
	t.seq++
	r := SpendReport{Seq: t.seq}
	for _, tenant := range sortedKeys(t.open) {
		tt := t.open[tenant]
		r.Rows = append(r.Rows, SpendRow{Tenant: tenant, Dim: DimTenant, SpendAmount: tt.total})
		first := len(r.Rows)
		for c, a := range tt.cells {
			r.Rows = append(r.Rows, SpendRow{Tenant: tenant, Dim: spendDims[c.dim], Value: c.value, SpendAmount: a})
		}
		slices.SortFunc(r.Rows[first:], func(a, b SpendRow) int {
			if c := strings.Compare(a.Dim, b.Dim); c != 0 {
				return c
			}
			return strings.Compare(a.Value, b.Value)
		})
	}
	t.open = map[string]*tenantTally{}
	return r
}

// Ack drops the reports the ledger has applied: those up to seq.
func (t *SpendTally) Ack(seq uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.sent = slices.DeleteFunc(t.sent, func(r SpendReport) bool { return r.Seq <= seq })
}

// Journal returns what a node's spend journal keeps of the tally: every
// report not acknowledged, and what was charged since as the report it
// would seal next (not sealed: the tally is unchanged). A node restarted
// after a crash sends them under its last boot's numbers
// (BudgetHolder.Recover), so that what its journal held is attributed
// once.
func (t *SpendTally) Journal() []SpendReport {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := slices.Clone(t.sent)
	if len(t.open) > 0 {
		open, seq := t.open, t.seq
		r := t.sealLocked()
		t.open, t.seq = open, seq
		out = append(out, r)
	}
	return out
}
