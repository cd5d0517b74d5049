package node

import (
	"context"
	"math"
	"net/http"
	"slices"
	"strings"
	"time"
)

// Status is GET /v1/mesh/status: one node's view of itself and the mesh.
type Status struct {
	Node         string `json:"node"`
	Region       string `json:"region"`
	Jurisdiction string `json:"jurisdiction"`
	Build        string `json:"build,omitempty"`
	// Phase is serving, or where a drain is: grace, finishing, settling,
	// leaving, stopped.
	Phase    string `json:"phase"`
	Ready    bool   `json:"ready"`
	InFlight int64  `json:"in_flight"`
	// Role is voter or member (a node that leases from the voters), and
	// Raft the voter's Raft state (Leader, Follower, Candidate).
	Role   string `json:"role"`
	Raft   string `json:"raft,omitempty"`
	Leader string `json:"leader"` // "" when none is known
	// Members counts the mesh's members by state (alive, draining,
	// suspect, failed, left).
	Members map[string]int `json:"members"`
	// Providers are those this node's planner sees healthy, and Unhealthy
	// the rest (ejected or cooling down after a 429).
	Providers []string `json:"healthy_providers"`
	Unhealthy []string `json:"unhealthy_providers"`
	// Leases are the budget leases and rate shares this node holds.
	Leases     []LeaseInfo     `json:"budget_leases"`
	RateShares []RateShareInfo `json:"rate_shares"`
	// Admission is this node's admission queue.
	Admission AdmissionInfo `json:"admission"`
	UptimeSec float64       `json:"uptime_s"`
}

// AdmissionInfo is how requests wait for budget escrow or a rate share on
// a node: how many wait now, and how many did since it started and for
// how long in all.
type AdmissionInfo struct {
	Waiting    int     `json:"waiting"`
	Waited     int64   `json:"waited_total"`
	WaitedSec  float64 `json:"waited_seconds_total"`
	MaxWaitSec float64 `json:"max_wait_s"` // limits.admission_wait
	QueueLimit int     `json:"queue_limit"`
}

// LeaseInfo is a budget lease this node holds.
type LeaseInfo struct {
	Tenant      string  `json:"tenant"`
	Period      string  `json:"period"`
	GrantedUSD  float64 `json:"granted_usd"`
	SpentUSD    float64 `json:"spent_usd"`
	InflightUSD float64 `json:"inflight_usd"`
	ExpiresSec  float64 `json:"expires_in_s"`
}

// RateShareInfo is this node's share of a provider's mesh-wide rate, per
// minute (-1: unlimited).
type RateShareInfo struct {
	Provider string  `json:"provider"`
	RPM      float64 `json:"rpm"`
	TPM      float64 `json:"tpm"`
	// Spare is what is left of it in the current window, in requests
	// (gossiped: peers whose share is spent forward here); -1 unknown.
	Spare int `json:"spare"`
}

func (n *Node) status(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, n.Status(r.Context()))
}

// Status returns the node's view of itself and the mesh.
func (n *Node) Status(ctx context.Context) Status {
	now := n.now()
	st := Status{
		Node: n.s.Name, Region: n.s.Region, Jurisdiction: n.s.Jurisdiction, Build: n.version,
		Phase: n.Phase(), Ready: n.Ready(), InFlight: n.inFlight.Load(), Role: "member",
		Members: map[string]int{}, Providers: []string{}, Unhealthy: []string{},
		Leases: []LeaseInfo{}, RateShares: []RateShareInfo{}, UptimeSec: now.Sub(n.started).Seconds(),
		Admission: AdmissionInfo{Waited: n.admitted.waited.Load(), WaitedSec: time.Duration(n.admitted.waitedNs.Load()).Seconds(),
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
			st.Leases = append(st.Leases, LeaseInfo{Tenant: hl.Tenant, Period: hl.Period, GrantedUSD: hl.Granted.USD(),
				SpentUSD: hl.Spent.USD(), InflightUSD: hl.Inflight.USD(), ExpiresSec: max(hl.Expires.Sub(now).Seconds(), 0)})
		}
		st.Admission.Waiting = l.budgets.Waiting() + int(n.admitted.rateWaiting.Load())
		spare := map[string]int{}
		for _, s := range l.rates.Spares(now) {
			spare[s.Provider] = s.Requests
		}
		for p, s := range l.rates.Shares(now) {
			info := RateShareInfo{Provider: p, RPM: s[0], TPM: s[1], Spare: -1}
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
		slices.SortFunc(st.RateShares, func(a, b RateShareInfo) int { return strings.Compare(a.Provider, b.Provider) })
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
