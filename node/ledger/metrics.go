package ledger

import (
	"math"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/llmesh/llmesh/consensus"
)

// Collector returns the ledger's metrics, read when Prometheus scrapes;
// rateWaiting counts the requests waiting now for a rate share (the
// node's executor knows them).
func (l *Ledger) Collector(rateWaiting func() int) prometheus.Collector {
	return &collector{l: l, rateWaiting: rateWaiting}
}

// collector reads the ledger's figures when Prometheus scrapes.
type collector struct {
	l *Ledger
	// rateWaiting counts the requests waiting now for a rate share.
	rateWaiting func() int
}

var (
	descLeases = prometheus.NewDesc("llmesh_ledger_leases_outstanding",
		"Budget leases outstanding in the whole ledger (voters) or held by this node (others), by scope.", []string{"scope"}, nil)
	descReserved = prometheus.NewDesc("llmesh_budget_reserved_usd",
		"Budget escrow reserved: in the whole ledger (scope mesh, voters only) or held free by this node (scope node).", []string{"scope"}, nil)
	descInflight = prometheus.NewDesc("llmesh_budget_inflight_usd",
		"Budget reserved by this node's attempts under way.", nil, nil)
	descOverspend = prometheus.NewDesc("llmesh_budget_overspend_usd",
		"Worst-case overspend: spend reported beyond escrow. Zero while nodes keep to their escrow.", nil, nil)
	descForfeited = prometheus.NewDesc("llmesh_budget_forfeited_usd",
		"Escrow written off as spent because its node could not account for it (a restart, an operator's forfeit).", nil, nil)
	descSettled = prometheus.NewDesc("llmesh_budget_settled_usd",
		"Spend settled in the current books, by tenant and period (voters only).", []string{"tenant", "period"}, nil)
	descLimit = prometheus.NewDesc("llmesh_budget_limit_usd",
		"A tenant's budget for the current period, by tenant and period (voters only).", []string{"tenant", "period"}, nil)
	descRaftState = prometheus.NewDesc("llmesh_raft_state",
		"1 for this voter's Raft state (Leader, Follower, Candidate, Shutdown).", []string{"state"}, nil)
	descLastContact = prometheus.NewDesc("llmesh_raft_last_contact_seconds",
		"Seconds since this follower last heard from the leader (0 on the leader).", nil, nil)
	descAdmissionQueue = prometheus.NewDesc("llmesh_admission_queue_depth",
		"Requests waiting on this node for budget escrow (a top-up in flight) or a rate share.", nil, nil)
	descRateShare = prometheus.NewDesc("llmesh_rate_share_per_minute",
		"This node's share of a provider's mesh-wide rate, by provider and dimension (requests or tokens).", []string{"provider", "dimension"}, nil)
)

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descLeases, descReserved, descInflight, descOverspend, descForfeited, descSettled, descLimit, descRaftState, descLastContact, descRateShare, descAdmissionQueue} {
		ch <- d
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	l := c.l
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	leases, free, inflight := l.budgets.Escrow()
	gauge(descLeases, float64(leases), "node")
	gauge(descReserved, free.USD(), "node")
	gauge(descInflight, inflight.USD())
	gauge(descAdmissionQueue, float64(l.budgets.Waiting()+c.rateWaiting()))
	for p, s := range l.rates.Shares(time.Now()) {
		for i, dim := range []string{"requests", "tokens"} {
			if !math.IsInf(s[i], 0) {
				gauge(descRateShare, s[i], p, dim)
			}
		}
	}
	if l.server == nil {
		return
	}
	var books []consensus.BookView
	l.server.FSM().Read(func(led *consensus.Ledger) { books = led.Books() })
	var n int
	var reserved, over, forfeited consensus.Nanos
	for _, b := range books {
		n += b.Leases
		reserved += b.Reserved
		over += b.Overspend
		forfeited += b.Forfeited
		gauge(descSettled, b.Settled.USD(), b.Tenant, b.Period)
		gauge(descLimit, b.Limit.USD(), b.Tenant, b.Period)
	}
	gauge(descLeases, float64(n), "mesh")
	gauge(descReserved, reserved.USD(), "mesh")
	gauge(descOverspend, over.USD())
	gauge(descForfeited, forfeited.USD())
	state := l.server.State()
	for _, s := range []string{"Leader", "Follower", "Candidate", "Shutdown"} {
		v := 0.0
		if s == state {
			v = 1
		}
		gauge(descRaftState, v, s)
	}
	contact := 0.0
	if state != "Leader" {
		if lc := l.server.LastContact(); !lc.IsZero() {
			contact = time.Since(lc).Seconds()
		}
	}
	gauge(descLastContact, contact)
}
