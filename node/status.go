package node

import (
	"context"
	"net/http"
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
	if n.ledger != nil {
		ls := n.ledger.Status(ctx, now)
		st.Raft, st.Leader, st.LedgerVersion = ls.Raft, ls.Leader, ls.LedgerVersion
		st.Leases = append(st.Leases, ls.Leases...)
		st.RateShares = append(st.RateShares, ls.RateShares...)
		st.Admission.Waiting = ls.Waiting + int(n.admitted.rateWaiting.Load())
	}
	return st
}

// drain serves POST /v1/mesh/drain and /v1/mesh/leave: the node drains
// (see Shutdown) in the background and the agent exits when it is done.
// The answer comes at once; GET /v1/mesh/status follows the phases.
func (n *Node) drain(w http.ResponseWriter, r *http.Request) {
	n.Drain()
	// The drain runs in the background and may not have set its first
	// phase yet: the answer names the phase it started, never serving.
	phase := n.Phase()
	if phase == phaseServing {
		phase = phaseGrace
	}
	writeJSON(w, http.StatusAccepted, map[string]any{
		"node": n.s.Name, "phase": phase, "grace_s": n.s.DrainGrace.Seconds(), "timeout_s": n.s.DrainTimeout.Seconds(),
	})
}
