package node_test

import (
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/llmesh/llmesh/node"
	"github.com/llmesh/llmesh/sim/loadtest"
)

// A tenant with a $0.05 total budget and a burst of 200 requests, 24 at
// a time, spread over three nodes (and over ten: three voters and seven
// nodes that lease from them): no request is refused with 429 (lease
// mechanics are not the client's problem), every one is answered 200
// until the budget is spent and 402 after; the provider charges at most
// the budget and within one request's upper bound of it; and then every
// node answers 402 within a second.
func TestBurstSpendsTheBudgetWithoutRefusals(t *testing.T) {
	for _, n := range []int{3, 10} {
		t.Run(fmt.Sprintf("nodes=%d", n), func(t *testing.T) {
			if n > 3 && testing.Short() {
				t.Skip("ten nodes")
			}
			burst(t, n)
		})
	}
}

func burst(t *testing.T, nodes int) {
	const budget = 0.05
	// 5 to 20 completion tokens at $100 per million: a request may cost
	// up to $0.002 (the prompt adds a few millionths).
	m := startMeshWith(t, nodes, []upstream{{name: "p", kind: "openai", in: 1, out: 100}}, func(i int, c *node.Config) {
		c.Tenants[0].Budget = &node.BudgetSection{USD: budget, Period: "total"}
		c.Node.RPC, c.Node.DataDir = "127.0.0.1:0", t.TempDir()
		if i < 3 {
			c.Node.Voter, c.Node.BootstrapExpect, c.Node.Raft = true, 3, "127.0.0.1:0"
		}
	}, fastRaft)
	clients := make([]openai.Client, len(m.urls))
	for i, u := range m.urls {
		clients[i] = openai.NewClient(option.WithBaseURL(u+"/v1/"), option.WithAPIKey(testKey), option.WithMaxRetries(0))
	}
	var codes sync.Map
	count := func(code int) {
		n, _ := codes.LoadOrStore(code, new(atomic.Int64))
		n.(*atomic.Int64).Add(1)
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for w := range 24 {
		wg.Go(func() {
			for i := next.Add(1); i <= 200; i = next.Add(1) {
				count(loadtest.ChatStatus(t, clients[w%nodes], 5+i%16))
			}
		})
	}
	wg.Wait()
	got := map[int]int64{}
	codes.Range(func(k, v any) bool { got[k.(int)] = v.(*atomic.Int64).Load(); return true })
	charged := m.emus["p"].Stats().ChargedUSD
	t.Logf("%d nodes: answers %v; the provider charged $%.6f of $%.2f (%.1f%%)", nodes, got, charged, budget, 100*charged/budget)
	for code, n := range got {
		if code != 200 && code != 402 {
			t.Errorf("%d requests answered %d", n, code)
		}
	}
	const upper = 0.002 + 1e-4
	if charged > budget+1e-9 {
		t.Fatalf("the provider charged $%.9f against a budget of $%.2f", charged, budget)
	}
	if got[402] > 0 && charged < budget-upper {
		t.Fatalf("402 with $%.6f of the budget unspent, more than one request's upper bound ($%.4f)", budget-charged, upper)
	}
	if got[402] == 0 {
		t.Fatalf("200 requests did not spend the budget: the test spends too little to reach its limit")
	}
	// Each node now refuses with 402, at once.
	for i, c := range clients {
		start := time.Now()
		code := loadtest.ChatStatus(t, c, 20)
		if took := time.Since(start); code != http.StatusPaymentRequired || took > time.Second {
			t.Fatalf("node %d answered %d after %v once the budget was spent; want 402 within a second", i, code, took)
		}
	}
}
