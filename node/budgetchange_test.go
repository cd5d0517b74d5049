package node_test

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/llmesh/llmesh/sim/harness/wait"
)

// bookRow is one row of GET /v1/mesh/budgets.
type bookRow struct {
	Tenant     string
	Period     string
	LimitUSD   float64 `json:"limit_usd"`
	SettledUSD float64 `json:"settled_usd"`
	Leases     int
}

func bookRows(t *testing.T, url string) []bookRow {
	t.Helper()
	var doc struct{ Budgets []bookRow }
	if code := getJSON(t, url+"/v1/mesh/budgets?consistency=linearizable", "", &doc); code != 200 {
		t.Fatalf("budgets: %d", code)
	}
	return doc.Budgets
}

// The reproduction on three voters: a tenant made live with
// llmesh tenants add (the admin API), a day's budget spent a little,
// then changed to a total of $0.00002, about fifteen requests' worth
// (two requests' upper bounds). What the new period settles never
// exceeds that plus one request's upper bound, every node answers 402
// within a second once it is spent, and the day's books stop growing
// once every node has learned of the change (within a second: until a
// node has, it spends under the old budget, as the day's).
func TestBudgetPeriodChangeHoldsAtOnce(t *testing.T) {
	m := startMeshWith(t, 3, []upstream{{name: "p", kind: "openai", in: 0.1, out: 0.1}}, voters(t, 3, nil), fastRaft)
	const key = "sk-llmesh-test-beta-0123456789abcdefghijklm"
	sum := sha256.Sum256([]byte(key))
	wait.For(t, 30*time.Second, "a Raft leader", func() bool {
		return adminPost(t, m.urls[0]+"/v1/mesh/tenants/beta/keys", "", map[string]any{"key_sha256": hex.EncodeToString(sum[:]), "create": true}) == 200
	})
	if code := adminCall(t, http.MethodPut, m.urls[1]+"/v1/mesh/budgets/beta", "", map[string]any{"usd": 1, "period": "day"}); code != 200 {
		t.Fatalf("budgets set day: %d", code)
	}
	body := `{"model":"gpt-4o-mini","max_tokens":5,"messages":[{"role":"user","content":"Hello"}]}`
	wait.For(t, 5*time.Second, "every node to take the key", func() bool {
		for _, u := range m.urls {
			if postAs(t, u, key, body).StatusCode != 200 {
				return false
			}
		}
		return true
	})
	dayOf := func() float64 {
		for _, r := range bookRows(t, m.urls[0]) {
			if r.Tenant == "beta" && r.Period != "total" {
				return r.SettledUSD
			}
		}
		return -1
	}
	const limit = 0.00002
	if code := adminCall(t, http.MethodPut, m.urls[2]+"/v1/mesh/budgets/beta", "", map[string]any{"usd": limit, "period": "total"}); code != 200 {
		t.Fatalf("budgets set total: %d", code)
	}
	// A client's requests, one every 100 ms, to each node in turn, until
	// one is refused 402; then every node answers 402 within a second.
	var served atomic.Int64
	var first402 time.Time
	for i := 0; first402.IsZero(); i++ {
		if i > 200 {
			t.Fatalf("200 requests after the change to a $%g total, none refused: the new limit is not enforced", limit)
		}
		switch code := postAs(t, m.urls[i%3], key, body).StatusCode; code {
		case 200:
			served.Add(1)
		case 402:
			first402 = time.Now()
		default:
			t.Fatalf("request %d at node %d: %d", i, i%3, code)
		}
		time.Sleep(100 * time.Millisecond) // a client's pace
	}
	for i, u := range m.urls {
		wait.Every(20*time.Millisecond).For(t, time.Second, fmt.Sprintf("node %d to answer 402", i), func() bool {
			return postAs(t, u, key, body).StatusCode == 402
		})
	}
	if took := time.Since(first402); took > 2*time.Second {
		t.Errorf("the nodes took %v after the first 402 to refuse", took)
	}
	dayAfter := dayOf()
	time.Sleep(2 * time.Second) // nothing more may reach the day's books
	var total bookRow
	for _, r := range bookRows(t, m.urls[0]) {
		if r.Tenant == "beta" && r.Period == "total" {
			total = r
		}
	}
	// A request's upper bound: its prompt's bound (at most its 90 bytes
	// as tokens) and max_tokens, at $0.1 a million each.
	const upper = (90 + 5) * 0.1 / 1e6
	t.Logf("after the change: %d served; total books settled $%.9f of $%g; day books $%.9f",
		served.Load(), total.SettledUSD, limit, dayAfter)
	if total.SettledUSD > limit+upper+1e-12 {
		t.Errorf("the new period settled $%.9f, more than its $%g limit and one request's upper bound ($%.7f)", total.SettledUSD, limit, upper)
	}
	if served.Load() < 5 {
		t.Errorf("only %d requests served after the change to a $%g total: the new budget should serve about fifteen", served.Load(), limit)
	}
	if day := dayOf(); day != dayAfter {
		t.Errorf("the day's books grew from $%.9f to $%.9f after the change", dayAfter, day)
	}
}
