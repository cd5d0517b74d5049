package node_test

import (
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
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

// A budgeted tenant's traffic ramps from 1 to 500 requests a second over
// three nodes: no request is refused, and the wait admission adds is
// reported (it is the price of escrow that is topped up as demand grows).
func TestRampIsNeverRefused(t *testing.T) {
	if testing.Short() {
		t.Skip("ramps for 30 s")
	}
	m := startMeshWith(t, 3, []upstream{{name: "p", kind: "openai", in: 0.1, out: 0.2}}, voters(t, 3, func(i int, c *node.Config) {
		c.Tenants[0].Budget = &node.BudgetSection{USD: 1000, Period: "month"}
	}), fastRaft)
	clients := make([]openai.Client, len(m.urls))
	for i, u := range m.urls {
		clients[i] = openai.NewClient(option.WithBaseURL(u+"/v1/"), option.WithAPIKey(testKey), option.WithMaxRetries(0))
	}
	const ramp = 30 * time.Second
	// The race detector makes three nodes in one process on two cores
	// several times slower: there, the ramp goes to 100 a second.
	peak := 500.0
	if raceDetector {
		peak = 100
	}
	var codes sync.Map
	var wg sync.WaitGroup
	start := time.Now()
	sent := 0
	for {
		el := time.Since(start)
		if el >= ramp {
			break
		}
		// The rate at el is 1 + (peak-1) el/ramp per second; the requests
		// due by el are its integral.
		x := el.Seconds()
		due := int(x + (peak-1)*x*x/(2*ramp.Seconds()))
		for ; sent < due; sent++ {
			c := clients[sent%3]
			wg.Go(func() {
				code := loadtest.ChatStatus(t, c, 16)
				n, _ := codes.LoadOrStore(code, new(atomic.Int64))
				n.(*atomic.Int64).Add(1)
			})
		}
		time.Sleep(2 * time.Millisecond) // pacing: the ramp's schedule is followed every 2 ms
	}
	wg.Wait()
	got := map[int]int64{}
	codes.Range(func(k, v any) bool { got[k.(int)] = v.(*atomic.Int64).Load(); return true })
	var waits [][]float64
	for _, u := range m.urls {
		waits = append(waits, histogramQuantiles(t, u, "llmesh_admission_wait_seconds"))
	}
	t.Logf("%d requests over %v ramping to %.0f a second: %v; admission wait per node, [p50 p99] as bucket bounds in seconds: %v", sent, ramp, peak, got, waits)
	for code, n := range got {
		if code != 200 {
			t.Errorf("%d requests answered %d", n, code)
		}
	}
}

// histogramQuantiles reads a histogram from a node's /metrics and returns
// the upper bounds of the buckets holding its median and 99th percentile.
func histogramQuantiles(t *testing.T, url, name string) []float64 {
	t.Helper()
	type bucket struct{ le, n float64 }
	var bs []bucket
	for _, line := range strings.Split(readAll(t, mustGet(t, url+"/metrics").Body), "\n") {
		if !strings.HasPrefix(line, name+"_bucket{") {
			continue
		}
		i, j := strings.Index(line, `le="`), strings.Index(line, `"}`)
		if i < 0 || j < i {
			continue
		}
		le, err := strconv.ParseFloat(line[i+4:j], 64)
		if err != nil {
			le = math.Inf(1)
		}
		var n float64
		fmt.Sscan(strings.Fields(line)[1], &n)
		bs = append(bs, bucket{le, n})
	}
	if len(bs) == 0 {
		t.Fatalf("%s: no %s", url, name)
	}
	total := bs[len(bs)-1].n
	q := func(p float64) float64 {
		for _, b := range bs {
			if b.n >= p*total {
				return b.le
			}
		}
		return math.Inf(1)
	}
	return []float64{q(0.5), q(0.99)}
}
