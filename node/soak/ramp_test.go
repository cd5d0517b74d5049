package soak_test

import (
	"fmt"
	"math"
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

// A budgeted tenant's traffic ramps from 1 to 500 requests a second over
// three nodes: no request is refused, and the wait admission adds is
// reported (it is the price of escrow that is topped up as demand grows).
func TestRampIsNeverRefused(t *testing.T) {
	if testing.Short() {
		t.Skip("ramps for 30 s")
	}
	_, p := startProvider(t, 0.1, 0.2)
	m := startVoters(t, []node.ProviderSection{p}, func(c *node.Config) {
		c.Tenants[0].Budget = &node.BudgetSection{USD: 1000, Period: "month"}
	})
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
	for _, line := range metrics(url) {
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
