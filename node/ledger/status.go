package ledger

import (
	"context"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/llmesh/llmesh/node/views"
)

// Status is the ledger's part of a node's status.
type Status struct {
	Raft   string // this voter's Raft state; "" on other nodes
	Leader string // who leads, as this voter or a voter asked knows it
	// Leases are the budget leases this node holds.
	Leases []views.LeaseInfo
	// RateShares are this node's shares of the providers' rates, by
	// provider; -1 stands for no limit.
	RateShares []views.RateShareInfo
	// Waiting counts the requests waiting for budget escrow.
	Waiting int
	// LedgerVersion is the ledger version the voters agreed on; nil when
	// no voter told it.
	LedgerVersion *int
}

// Status reads the ledger's part of the node's status at now.
func (l *Ledger) Status(ctx context.Context, now time.Time) Status {
	var st Status
	if l.server != nil {
		st.Raft = l.server.State()
		st.Leader, _ = l.server.Leader()
	}
	if st.Leader == "" {
		st.Leader = l.leaderName(ctx)
	}
	if v, err := l.Version(ctx); err == nil {
		st.LedgerVersion = &v
	}
	for _, hl := range l.budgets.Leases() {
		st.Leases = append(st.Leases, views.LeaseInfo{Tenant: hl.Tenant, Period: hl.Period, GrantedUSD: hl.Granted.USD(),
			SpentUSD: hl.Spent.USD(), InflightUSD: hl.Inflight.USD(), ExpiresSec: max(hl.Expires.Sub(now).Seconds(), 0)})
	}
	st.Waiting = l.budgets.Waiting()
	st.RateShares = l.RateShares(now)
	return st
}

// RateShares are this node's shares of the providers' rates at now, by
// provider; -1 stands for no limit. It reads local state only.
func (l *Ledger) RateShares(now time.Time) []views.RateShareInfo {
	out := []views.RateShareInfo{}
	spare := map[string]int{}
	for _, s := range l.rates.Spares(now) {
		spare[s.Provider] = s.Requests
	}
	for p, s := range l.rates.Shares(now) {
		info := views.RateShareInfo{Provider: p, RPM: s[0], TPM: s[1], Spare: -1}
		if v, ok := spare[p]; ok {
			info.Spare = v
		}
		if math.IsInf(info.RPM, 0) {
			info.RPM = -1
		}
		if math.IsInf(info.TPM, 0) {
			info.TPM = -1
		}
		out = append(out, info)
	}
	slices.SortFunc(out, func(a, b views.RateShareInfo) int { return strings.Compare(a.Provider, b.Provider) })
	return out
}
