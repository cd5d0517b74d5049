package soak_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/llmesh/llmesh/node"
	"github.com/llmesh/llmesh/sim/harness/wait"
)

// shareSeries is a node's share of provider limited's requests a minute.
const shareSeries = `llmesh_rate_share_per_minute{dimension="requests",provider="limited"}`

// A provider with rpm 600 shared by three nodes never sees more than 600
// requests in any 60 s window, and the busier node holds the larger share.
func TestRateSharedByThreeNodes(t *testing.T) {
	if testing.Short() {
		t.Skip("runs for over a minute")
	}
	t.Parallel()
	srv := startRecorder(t)
	m := startVoters(t, []node.ProviderSection{{Name: "limited", Kind: "openai", Region: "eu-west", BaseURL: srv.url,
		Limits: node.RateSection{RPM: 600}, Models: []node.ModelSection{{Name: "gpt-4o-mini"}}}}, nil)
	// Uneven demand: node-0 asks for 12 requests a second, node-1 for 3,
	// node-2 for 1; together 960 a minute against 600.
	rates := []float64{12, 3, 1}
	ctx, stop := context.WithTimeout(context.Background(), 75*time.Second)
	defer stop()
	var served [3]atomic.Int64
	var wg sync.WaitGroup
	for i, rate := range rates {
		every(ctx, &wg, rate, func() {
			if post(t, m.urls[i]) == 200 {
				served[i].Add(1)
			}
		})
	}
	shares := func() [3]float64 {
		var out [3]float64
		for i, u := range m.urls {
			fmt.Sscan(metric(u, shareSeries), &out[i])
		}
		return out
	}
	time.Sleep(40 * time.Second) // let demand build; the load runs meanwhile, nothing is awaited
	mid := shares()
	wg.Wait()
	times := srv.arrivals("")
	worst := busiestMinute(times)
	t.Logf("shares at 40 s: %v; served %d/%d/%d; busiest 60 s window at the provider: %d", mid,
		served[0].Load(), served[1].Load(), served[2].Load(), worst)
	if worst > 600 {
		t.Fatalf("the provider saw %d requests within 60 s; limit 600", worst)
	}
	if !(mid[0] > mid[1] && mid[1] > 0) {
		t.Fatalf("shares %v: the busiest node should hold the most", mid)
	}
}

// A provider with rpm 600 shared by three nodes, all demand (15 requests
// a second, above the capacity) arriving at one node, and the leader
// killed a third of the way in: that node is served at 90% of the
// capacity or more, forwarding through the peers whose share it cannot
// use itself, before and after the kill; the provider never sees more
// than 600 requests in any 60 s window.
func TestRateShareSpillsToPeersThroughALeaderKill(t *testing.T) {
	if testing.Short() {
		t.Skip("runs for 80 s")
	}
	t.Parallel()
	srv := startRecorder(t)
	m := startVoters(t, []node.ProviderSection{{Name: "limited", Kind: "openai", Region: "eu-west", Reach: "global", BaseURL: srv.url,
		Limits: node.RateSection{RPM: 600}, Models: []node.ModelSection{{Name: "gpt-4o-mini"}}}}, nil)
	var lead int
	wait.For(t, 10*time.Second, "a leader", func() bool { lead = m.leader(); return lead >= 0 })
	busy := (lead + 1) % 3 // the demand arrives at a node that is not the leader
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	var codes sync.Map
	var wg sync.WaitGroup
	t0 := time.Now()
	every(ctx, &wg, 15, func() {
		n, _ := codes.LoadOrStore(post(t, m.urls[busy]), new(atomic.Int64))
		n.(*atomic.Int64).Add(1)
	})
	shares := func() []string { // of the nodes that answer
		var out []string
		for _, u := range m.urls {
			if v := metric(u, shareSeries); v != "" {
				out = append(out, v)
			}
		}
		return out
	}
	// The load runs throughout; the kill comes a third of the way in.
	time.Sleep(20 * time.Second) // the load's window before the kill; nothing is awaited
	before := shares()
	m.nodes[lead].Kill()
	time.Sleep(60 * time.Second) // and after it
	t.Logf("shares before the kill %v, at the end %v", before, shares())
	stop()
	wg.Wait()
	times := srv.arrivals("")
	worst := busiestMinute(times)
	in := func(from, to time.Duration) int {
		i, _ := slices.BinarySearchFunc(times, t0.Add(from), func(a, b time.Time) int { return a.Compare(b) })
		j, _ := slices.BinarySearchFunc(times, t0.Add(to), func(a, b time.Time) int { return a.Compare(b) })
		return j - i
	}
	early, late := in(5*time.Second, 65*time.Second), in(20*time.Second, 80*time.Second)
	var per10 []int
	for s := time.Duration(0); s < 80*time.Second; s += 10 * time.Second {
		per10 = append(per10, in(s, s+10*time.Second))
	}
	t.Logf("the provider's arrivals per 10 s: %v", per10)
	got := map[int]int64{}
	codes.Range(func(k, v any) bool { got[k.(int)] = v.(*atomic.Int64).Load(); return true })
	t.Logf("answers at %s: %v; the provider saw %d in 5-65 s, %d in 20-80 s (leader %s killed at 20 s); busiest 60 s window %d",
		m.nodes[busy].Name(), got, early, late, m.nodes[lead].Name(), worst)
	if worst > 600 {
		t.Fatalf("the provider saw %d requests within 60 s; limit 600", worst)
	}
	if early < 540 || late < 540 {
		t.Fatalf("served %d and %d requests a minute of a capacity of 600: less than 90%%", early, late)
	}
}
