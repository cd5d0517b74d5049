package node

// Spend attribution's admin side: GET /v1/mesh/spend answers from the
// ledger what every settled cost was attributed to (consensus/spend.go);
// the charges themselves reach it from the executor through the node's
// part in the ledger (ledger.Charges).

import (
	"cmp"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/llmesh/llmesh/consensus"
	"github.com/llmesh/llmesh/node/views"
	"github.com/llmesh/llmesh/route"
)

// chargeRecorder is where the executor reports the charges it settles:
// the ledger's spend tally, or nothing on a node with no part in it.
func (n *Node) chargeRecorder() route.ChargeRecorder {
	if n.ledger == nil {
		return nil
	}
	return n.ledger.Charges()
}

// spendHandler serves GET /v1/mesh/spend?by=tenant|key|tag|model|provider
// &since=DUR|RFC3339[&tenant=NAME][&consistency=linearizable|stale]:
// read from the ledger, through the leader after a barrier unless stale
// is asked for (then this node's replica, or a voter's). since is a
// duration back from now (Go's, or days as "7d"; 24h by default) or a
// time.
func (n *Node) spendHandler(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	by := cmp.Or(q.Get("by"), consensus.DimTenant)
	if !slices.Contains([]string{consensus.DimTenant, consensus.DimKey, consensus.DimTag, consensus.DimModel, consensus.DimProvider}, by) {
		n.writeError(w, &route.InvalidRequestError{Param: "by", Msg: fmt.Sprintf("%q: spend is by tenant, key, tag, model or provider", by)})
		return
	}
	since, err := parseSince(q.Get("since"), n.now())
	if err != nil {
		n.writeError(w, &route.InvalidRequestError{Param: "since", Msg: err.Error()})
		return
	}
	sq := consensus.SpendQuery{By: by, Since: since.UnixNano(), Tenant: q.Get("tenant")}
	var v consensus.SpendView
	gotLin, ok := n.readLedgerView(w, r, sq.Encode(), q.Get("consistency") != "stale", &v)
	if !ok {
		return
	}
	writeJSON(w, http.StatusOK, n.spendView(v, sq.Tenant, gotLin))
}

// spendView is the ledger's answer as the admin API gives it.
func (n *Node) spendView(v consensus.SpendView, tenant string, linearizable bool) views.Spend {
	out := views.Spend{By: v.By, Tenant: tenant, Step: v.Step, From: time.Unix(0, v.From).UTC(), Until: time.Unix(0, v.Until).UTC(),
		TotalUSD: v.Total.Nanos.USD(), TotalNanos: int64(v.Total.Nanos), Requests: v.Total.Requests,
		Rows: []views.SpendRow{}, Series: []views.SpendPoint{}, Consistency: "stale"}
	if linearizable {
		out.Consistency = "linearizable"
	}
	for _, row := range v.Rows {
		sr := views.SpendRow{Tenant: row.Tenant, Name: row.Name, USD: row.Nanos.USD(), Nanos: int64(row.Nanos), Requests: row.Requests}
		if v.Total.Nanos > 0 {
			sr.Share = float64(row.Nanos) / float64(v.Total.Nanos)
		}
		if v.By == consensus.DimKey {
			sr.Label = n.tenants.Load().KeyName(row.Tenant, row.Name)
		}
		out.Rows = append(out.Rows, sr)
	}
	for _, b := range v.Buckets {
		p := views.SpendPoint{Start: time.Unix(0, b.Start).UTC(), USD: b.Total.Nanos.USD(), Nanos: int64(b.Total.Nanos), RowsNanos: make([]int64, len(b.Rows))}
		for i, c := range b.Rows {
			p.RowsNanos[i] = int64(c)
		}
		out.Series = append(out.Series, p)
	}
	return out
}

// parseSince reads since: "" (24 hours), a duration back from now (Go's
// syntax, or whole days as "7d") or an RFC 3339 time.
func parseSince(s string, now time.Time) (time.Time, error) {
	if s == "" {
		return now.Add(-24 * time.Hour), nil
	}
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	d, err := time.ParseDuration(s)
	if days, ok := strings.CutSuffix(s, "d"); ok && err != nil {
		var n int
		if n, err = strconv.Atoi(days); err == nil {
			d = time.Duration(n) * 24 * time.Hour
		}
	}
	if err != nil || d < 0 {
		return time.Time{}, fmt.Errorf("%q is neither a duration back from now (24h, 7d) nor an RFC 3339 time", s)
	}
	return now.Add(-d), nil
}
