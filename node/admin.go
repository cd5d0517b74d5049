package node

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/llmesh/llmesh/consensus"
	"github.com/llmesh/llmesh/node/tenant"
	"github.com/llmesh/llmesh/node/ui"
	"github.com/llmesh/llmesh/node/views"

	"github.com/llmesh/llmesh/route"
)

var (
	errNoLedger          = errors.New("this node has no part in the ledger: it is not a voter and does not gossip")
	errNoSuchTenant      = errors.New("no such tenant")
	errLedgerUnavailable = errors.New("the ledger cannot be reached")
	errAdminToken        = errors.New("this admin endpoint needs the admin token: send Authorization: Bearer TOKEN")
	errAdminRemote       = errors.New("without an admin token the admin API answers only on loopback: set node.admin_token_env")
	errNoGossip          = errors.New("this node does not gossip: set node.gossip")
)

// admin guards an operator endpoint: with the admin token when one is
// configured (compared in constant time; a dashboard session cookie may
// read), else to loopback clients only, so that an open HTTP port does not
// let anyone steer the node.
func (n *Node) admin(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if want := n.s.AdminToken.Reveal(); want != "" {
			got := tenant.Bearer(r.Header.Get("Authorization"))
			// The dashboard's session cookie reads the mesh's state; only
			// the token steers, or profiles.
			read := (r.Method == http.MethodGet || r.Method == http.MethodHead) && strings.HasPrefix(r.URL.Path, "/v1/mesh/")
			if subtle.ConstantTimeCompare([]byte(got), []byte(want)) != 1 && !(read && ui.SessionValid(r, want)) {
				n.writeError(w, errAdminToken)
				return
			}
		} else if !fromLoopback(r) {
			n.writeError(w, errAdminRemote)
			return
		} else if err := browserGuard(r); err != nil {
			n.writeError(w, err)
			return
		}
		h(w, r)
	}
}

var errCrossSite = errors.New("without an admin token the admin API answers loopback tools only, not a web page: the request came from another site, or named a Host that is not loopback (DNS rebinding); set node.admin_token_env to use it from a browser")

// browserGuard keeps web pages off a token-less admin API that only
// loopback reaches. A page on any site can make the browser send simple
// POSTs to 127.0.0.1 (no preflight), and a name rebound to 127.0.0.1 lets
// it read answers too. Browsers mark such requests (Origin, Sec-Fetch-Site)
// and send the page's name as Host; command-line tools send neither mark
// and a loopback Host.
func browserGuard(r *http.Request) error {
	if site := r.Header.Get("Sec-Fetch-Site"); site != "" && site != "same-origin" && site != "none" {
		return errCrossSite
	}
	if o := r.Header.Get("Origin"); o != "" {
		u, err := url.Parse(o)
		if err != nil || u.Host != r.Host {
			return errCrossSite
		}
	}
	host := r.Host
	if h, _, err := net.SplitHostPort(r.Host); err == nil {
		host = h
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return errCrossSite
	}
	return nil
}

func fromLoopback(r *http.Request) bool {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	ip := net.ParseIP(host)
	return err == nil && ip != nil && ip.IsLoopback()
}

func (n *Node) members(w http.ResponseWriter, r *http.Request) {
	if n.mesh == nil {
		writeJSON(w, http.StatusOK, views.Members{Members: []views.MemberInfo{{
			Name: n.s.Name, Region: n.s.Region, Jurisdiction: n.s.Jurisdiction, HTTP: n.HTTPAddr(),
			State: "alive", Voter: n.s.Voter, RTTMillis: 0, Self: true,
		}}})
		return
	}
	out := []views.MemberInfo{}
	inRaft := n.raftVoters(r.Context())
	for _, m := range n.mesh.Members() {
		rtt := -1.0
		if m.Self {
			rtt = 0
		} else if m.RTTKnown {
			rtt = float64(m.RTT.Microseconds()) / 1000
		}
		out = append(out, views.MemberInfo{
			Name: m.Name, Region: m.Meta.Region, Jurisdiction: m.Meta.Jurisdiction, Address: m.Addr,
			HTTP: m.Meta.HTTP, RPC: m.Meta.RPC, State: m.State, Voter: m.Meta.Voter && (inRaft == nil || inRaft[m.Name] || !gone(m.State)), RTTMillis: rtt,
			Build: m.Meta.Build, Self: m.Self,
		})
	}
	writeJSON(w, http.StatusOK, views.Members{Members: out})
}

// raftVoters returns the voters of the Raft configuration, read from
// any voter within a second; nil when it cannot be read (then gossip's
// word stands).
func (n *Node) raftVoters(ctx context.Context) map[string]bool {
	if n.ledger == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	peers, err := n.ledger.Peers(ctx, false)
	if err != nil || len(peers) == 0 {
		return nil
	}
	voters := map[string]bool{}
	for _, p := range peers {
		if p.Voter {
			voters[p.ID] = true
		}
	}
	return voters
}

// gone says whether a member in gossip state s has left the mesh or
// failed: such a member is a voter only while Raft still has it.
func gone(s string) bool { return s == "left" || s == "failed" }

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func (n *Node) providers(w http.ResponseWriter, r *http.Request) {
	now := n.now()
	reports := map[string][]views.ObserverReport{}
	if n.mesh != nil {
		for _, rep := range n.mesh.Reports() {
			reports[rep.Provider] = append(reports[rep.Provider], views.ObserverReport{
				Observer: rep.Observer, AgeSeconds: rep.Age.Seconds(), TTFTMillis: ms(rep.TTFT), LatencyMillis: ms(rep.Latency),
				ErrorRate: rep.ErrorRate, Ejected: rep.Ejected, CoolingSeconds: rep.CoolingFor.Seconds(),
				IdleSeconds: rep.IdleFor.Seconds(), RemainingRequests: rep.RemainingReq, RemainingTokens: rep.RemainingTok,
			})
		}
	}
	out := []views.ProviderInfo{}
	for _, p := range n.catalog().Providers() {
		h := n.planner().Health.Health(p.Name, now)
		info := views.ProviderInfo{
			Name: p.Name, Kind: string(p.Kind), Region: p.Region, Reach: string(p.Reach), Jurisdictions: p.Jurisdictions.String(),
			View: views.ProviderView{Ejected: h.Ejected, Degraded: h.Degraded, TTFTMillis: ms(h.TTFT), LatencyMillis: ms(h.Latency), ErrorRate: h.ErrorRate,
				CacheHitRatio: h.CacheHit},
			Observers: reports[p.Name],
		}
		if h.CoolingUntil.After(now) {
			info.View.CoolingSeconds = h.CoolingUntil.Sub(now).Seconds()
		}
		for _, m := range p.Models {
			info.Models = append(info.Models, m.Name)
		}
		if info.Observers == nil {
			info.Observers = []views.ObserverReport{}
		}
		out = append(out, info)
	}
	writeJSON(w, http.StatusOK, views.Providers{Node: n.s.Name, Providers: out})
}

// join serves POST /v1/mesh/join {"addrs": ["host:port", ...]}.
func (n *Node) join(w http.ResponseWriter, r *http.Request) {
	if n.mesh == nil {
		n.writeError(w, errNoGossip)
		return
	}
	var req struct {
		Addrs []string `json:"addrs"`
	}
	const shape = `{"addrs": ["host:port", ...]}`
	if !n.readAdminJSON(w, r, &req, shape) {
		return
	}
	if len(req.Addrs) == 0 {
		n.writeError(w, &route.InvalidRequestError{Msg: "the body must be " + shape})
		return
	}
	for i, a := range req.Addrs {
		req.Addrs[i] = strings.TrimSpace(a)
	}
	joined, err := n.mesh.Join(req.Addrs)
	if joined == 0 {
		msg := "no address answered"
		if err != nil {
			msg += ": " + err.Error()
		}
		writeJSON(w, http.StatusBadGateway, map[string]any{"error": apiError{Message: msg, Type: "server_error", Code: "join_failed"}})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"joined": joined, "members": len(n.mesh.Members())})
}

// budgets serves GET /v1/mesh/budgets?consistency=linearizable|stale
// (default linearizable: served by the leader after a barrier).
func (n *Node) budgets(w http.ResponseWriter, r *http.Request) {
	var books []consensus.BookView
	gotLin, ok := n.readLedgerView(w, r, "books", r.URL.Query().Get("consistency") != "stale", &books)
	if !ok {
		return
	}
	out := []views.BudgetInfo{}
	for _, bv := range books {
		out = append(out, views.BudgetInfo{Tenant: bv.Tenant, Period: bv.Period, LimitUSD: bv.Limit.USD(), SettledUSD: bv.Settled.USD(),
			ReservedUSD: bv.Reserved.USD(), RemainingUSD: bv.Remaining.USD(), ForfeitedUSD: bv.Forfeited.USD(),
			OverspendUSD: bv.Overspend.USD(), Leases: bv.Leases, ExpiredLeases: bv.Expired})
	}
	consistency := "stale"
	if gotLin {
		consistency = "linearizable"
	}
	writeJSON(w, http.StatusOK, views.Budgets{Consistency: consistency, Budgets: out})
}

// shares serves GET /v1/mesh/shares?consistency=linearizable|stale
// (default linearizable): every holder's rate share as the ledger records
// it, and what it counts against the capacity now.
func (n *Node) shares(w http.ResponseWriter, r *http.Request) {
	var shares []consensus.ShareView
	gotLin, ok := n.readLedgerView(w, r, "shares", r.URL.Query().Get("consistency") != "stale", &shares)
	if !ok {
		return
	}
	out := views.Shares{Shares: []views.ShareInfo{}, Consistency: "stale"}
	if gotLin {
		out.Consistency = "linearizable"
	}
	for _, s := range shares {
		out.Shares = append(out.Shares, views.ShareInfo{Provider: s.Provider, Node: s.Node, RPM: s.RPM, TPM: s.TPM,
			Expires: time.Unix(0, s.Expires), CommittedRPM: s.CommittedRPM, CommittedTPM: s.CommittedTPM, Ghost: s.Ghost})
	}
	writeJSON(w, http.StatusOK, out)
}

// readLedgerView reads one of the ledger's views (through the leader when
// linearizable) into v, or answers the error; gotLin says whether the
// read was linearizable.
func (n *Node) readLedgerView(w http.ResponseWriter, r *http.Request, what string, linearizable bool, v any) (gotLin, ok bool) {
	if n.ledger == nil {
		n.writeError(w, errNoLedger)
		return false, false
	}
	var b []byte
	err := withLeader(r.Context(), func(ctx context.Context) (err error) {
		b, gotLin, err = n.ledger.Client().Read(ctx, what, linearizable)
		return err
	})
	if err != nil {
		n.writeError(w, fmt.Errorf("%w: %v", errLedgerUnavailable, err))
		return false, false
	}
	if err := json.Unmarshal(b, v); err != nil {
		n.writeError(w, err)
		return false, false
	}
	return gotLin, true
}

// leaderWait bounds how long an admin read waits for a Raft leader: a
// single voter elects itself within a couple of seconds of starting, and
// a read in that time should wait rather than fail.
const leaderWait = 5 * time.Second

// withLeader runs read, and again while it fails because no leader is
// known (yet), until it succeeds, leaderWait has passed or ctx ends; the
// last error is returned.
func withLeader(ctx context.Context, read func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, leaderWait)
	defer cancel()
	pause := 50 * time.Millisecond
	for {
		err := read(ctx)
		if err == nil || !(errors.Is(err, consensus.ErrNoLeader) || errors.Is(err, consensus.ErrNotLeader)) {
			return err
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		pause = min(2*pause, 500*time.Millisecond)
	}
}

// setBudget serves PUT /v1/mesh/budgets/{tenant} {"usd": 10, "period": "month"}.
func (n *Node) setBudget(w http.ResponseWriter, r *http.Request) {
	var req struct {
		USD    *float64 `json:"usd"`
		Period string   `json:"period"`
	}
	const shape = `{"usd": AMOUNT, "period": "day|month|total"}`
	if !n.readAdminJSON(w, r, &req, shape) {
		return
	}
	if req.USD == nil || *req.USD < 0 {
		n.writeError(w, &route.InvalidRequestError{Msg: "the body must be " + shape})
		return
	}
	if req.Period == "" {
		req.Period = consensus.PeriodMonth
	}
	if req.Period != consensus.PeriodDay && req.Period != consensus.PeriodMonth && req.Period != consensus.PeriodTotal {
		n.writeError(w, &route.InvalidRequestError{Param: "period", Msg: "must be day, month or total"})
		return
	}
	tenant := r.PathValue("tenant")
	n.applyAdmin(w, r, consensus.CmdSetBudget, map[string]any{"tenant": tenant, "budget": consensus.Budget{Limit: consensus.RoundNanos(*req.USD), Period: req.Period}},
		map[string]any{"tenant": tenant, "limit_usd": *req.USD, "period": req.Period})
}

// forfeit serves POST /v1/mesh/budgets/forfeit {"node": "name"}: the
// escrow of a node that will not come back (its name retired) is written
// off as spent, so that it stops holding budget for the rest of a period.
// (The leader does it by itself for a gone node whose leases expired more
// than ten minutes ago.)
func (n *Node) forfeit(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Node string `json:"node"`
	}
	if !n.readAdminJSON(w, r, &req, `{"node": "NAME"}`) {
		return
	}
	if req.Node == "" {
		n.writeError(w, &route.InvalidRequestError{Msg: `the body must be {"node": "NAME"}`})
		return
	}
	n.applyAdmin(w, r, consensus.CmdForfeit, req, map[string]any{"node": req.Node, "forfeited": true})
}

// raftPeers serves GET /v1/mesh/raft/peers: the Raft configuration,
// each server with the ledger version its build supports, and the
// version the ledger agreed on (left out when the voter asked is of a
// build before versions).
func (n *Node) raftPeers(w http.ResponseWriter, r *http.Request) {
	if n.ledger == nil {
		n.writeError(w, errNoLedger)
		return
	}
	var peers []consensus.Peer
	err := withLeader(r.Context(), func(ctx context.Context) (err error) {
		peers, err = n.ledger.Peers(ctx, false)
		return err
	})
	if err != nil {
		n.writeError(w, fmt.Errorf("%w: %v", errLedgerUnavailable, err))
		return
	}
	doc := map[string]any{"peers": peers}
	if v, err := n.ledger.Version(r.Context()); err == nil {
		doc["ledger_version"] = v
	}
	writeJSON(w, http.StatusOK, doc)
}

// newCommandID is unique per command: the node, its boot and a counter.
func newCommandID(node string) string {
	return fmt.Sprintf("%s/admin/%d/%d", node, bootTime, commandSeq.Add(1))
}

var (
	bootTime   = time.Now().UnixNano()
	commandSeq atomic.Uint64
)
