package node

import (
	"context"
	"math"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/llmesh/llmesh/node/views"
)

func (n *Node) status(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, n.Status(r.Context()))
}

// Status returns the node's view of itself and the mesh.
func (n *Node) Status(ctx context.Context) views.Status {
	now := n.now()
	st := views.Status{
		Node: n.s.Name, Region: n.s.Region, Jurisdiction: n.s.Jurisdiction, Build: n.version,
		Phase: n.Phase(), Ready: n.Ready(), InFlight: n.inFlight.Load(), Role: "member",
		Members: map[string]int{}, Providers: []string{}, Unhealthy: []string{},
		Leases: []views.LeaseInfo{}, RateShares: []views.RateShareInfo{}, UptimeSec: now.Sub(n.started).Seconds(),
		Admission: views.AdmissionInfo{Waited: n.admitted.waited.Load(), WaitedSec: time.Duration(n.admitted.waitedNs.Load()).Seconds(),
			MaxWaitSec: n.s.AdmissionWait.Seconds(), QueueLimit: n.s.AdmissionQueue},
	}
	if n.s.Voter {
		st.Role = "voter"
	}
	if n.mesh != nil {
		for _, m := range n.mesh.Members() {
			st.Members[m.State]++
		}
	} else {
		st.Members["alive"] = 1
	}
	for _, p := range n.catalog().Providers() {
		h := n.planner().Health.Health(p.Name, now)
		if h.Ejected || h.CoolingUntil.After(now) {
			st.Unhealthy = append(st.Unhealthy, p.Name)
		} else {
			st.Providers = append(st.Providers, p.Name)
		}
	}
	if l := n.ledger; l != nil {
		if l.server != nil {
			st.Raft = l.server.State()
			st.Leader, _ = l.server.Leader()
		}
		if st.Leader == "" {
			st.Leader = l.leaderName(ctx)
		}
		for _, hl := range l.budgets.Leases() {
			st.Leases = append(st.Leases, views.LeaseInfo{Tenant: hl.Tenant, Period: hl.Period, GrantedUSD: hl.Granted.USD(),
				SpentUSD: hl.Spent.USD(), InflightUSD: hl.Inflight.USD(), ExpiresSec: max(hl.Expires.Sub(now).Seconds(), 0)})
		}
		st.Admission.Waiting = l.budgets.Waiting() + int(n.admitted.rateWaiting.Load())
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
			st.RateShares = append(st.RateShares, info)
		}
		slices.SortFunc(st.RateShares, func(a, b views.RateShareInfo) int { return strings.Compare(a.Provider, b.Provider) })
	}
	return st
}

// leaderName asks a voter who leads, for a node that is not one.
func (l *ledger) leaderName(ctx context.Context) string {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	peers, err := l.peers(ctx, false)
	if err != nil {
		return ""
	}
	for _, p := range peers {
		if p.Leader {
			return p.ID
		}
	}
	return ""
}

// drain serves POST /v1/mesh/drain and /v1/mesh/leave: the node drains
// (see Shutdown) in the background and the agent exits when it is done.
// The answer comes at once; GET /v1/mesh/status follows the phases.
func (n *Node) drain(w http.ResponseWriter, r *http.Request) {
	n.Drain()
	writeJSON(w, http.StatusAccepted, map[string]any{
		"node": n.s.Name, "phase": n.Phase(), "grace_s": n.s.DrainGrace.Seconds(), "timeout_s": n.s.DrainTimeout.Seconds(),
	})
}
