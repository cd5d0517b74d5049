package series

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/llmesh/llmesh/node/views"
)

func TestRecordAndRead(t *testing.T) {
	r := New()
	t0 := time.Unix(1_000_000, 0)
	r.Record(t0, Observation{Provider: "p", Tenant: "acme", Latency: 20 * time.Millisecond, TTFT: 5 * time.Millisecond, CostUSD: 0.5,
		PromptTokens: 1000, CachedTokens: 768})
	r.Record(t0.Add(300*time.Millisecond), Observation{Provider: "p", Tenant: "acme", Via: "us-1", Error: true, Latency: 40 * time.Millisecond, CostUSD: 0.25,
		PromptTokens: 24})
	r.Record(t0.Add(2*time.Second), Observation{Tenant: "beta", Error: true, Latency: time.Millisecond})

	s := r.Last(t0.Add(2*time.Second), 3)
	if s.End != t0.Unix()+2 || s.Seconds != 3 {
		t.Fatalf("end %d, seconds %d", s.End, s.Seconds)
	}
	p := s.Providers["p"]
	if !slices.Equal(p.Requests, []int{2, 0, 0}) || !slices.Equal(p.Errors, []int{1, 0, 0}) ||
		!slices.Equal(p.LatencyMsSum, []float64{60, 0, 0}) || !slices.Equal(p.TTFTCount, []int{1, 0, 0}) ||
		!slices.Equal(p.CostUSD, []float64{0.75, 0, 0}) || !slices.Equal(p.PromptTokens, []int{1024, 0, 0}) || !slices.Equal(p.CachedTokens, []int{768, 0, 0}) {
		t.Fatalf("provider p: %+v", p)
	}
	if got := s.Forwards["us-1"].Requests; !slices.Equal(got, []int{1, 0, 0}) {
		t.Fatalf("forwards to us-1: %v", got)
	}
	if got := s.Providers[views.Refused]; !slices.Equal(got.Requests, []int{0, 0, 1}) || got.CostUSD != nil {
		t.Fatalf("refused: %+v (a zero array is left out)", got)
	}
	if _, ok := s.Tenants["acme"]; !ok {
		t.Fatal("acme missing")
	}
	// A key with nothing in the window is left out.
	if s := r.Last(t0.Add(10*time.Second), 5); len(s.Providers) != 0 || len(s.Tenants) != 0 {
		t.Fatalf("an idle window: %+v", s)
	}
}

// A slot written a whole window ago reads as zero, not as that second's.
func TestWrapAround(t *testing.T) {
	r := New()
	t0 := time.Unix(2_000_000, 0)
	r.Record(t0, Observation{Provider: "p"})
	later := t0.Add(Window * time.Second)
	if s := r.Last(later, Window); len(s.Providers) != 0 {
		t.Fatalf("a sample a window old is still read: %+v", s.Providers)
	}
	r.Record(later, Observation{Provider: "p"})
	s := r.Last(later, Window)
	if n := s.Providers["p"].Requests; len(n) != Window || n[Window-1] != 1 || slices.Max(n[:Window-1]) != 0 {
		t.Fatalf("after the wrap: %v", n)
	}
	if got := r.Last(later, 10*Window).Seconds; got != Window {
		t.Fatalf("more than a window asked: %d seconds", got)
	}
}

// Keys past MaxKeys are counted, under Other.
func TestKeysAreBounded(t *testing.T) {
	r := New()
	now := time.Unix(3_000_000, 0)
	for i := range MaxKeys + 100 {
		r.Record(now, Observation{Provider: fmt.Sprint("p", i)})
	}
	if len(r.keys) > MaxKeys+1 {
		t.Fatalf("%d rings for %d keys", len(r.keys), MaxKeys+100)
	}
	s := r.Last(now, 1)
	total := 0
	for _, v := range s.Providers {
		total += v.Requests[0]
	}
	if total != MaxKeys+100 || s.Providers[Other].Requests[0] == 0 {
		t.Fatalf("%d counted of %d; other %+v", total, MaxKeys+100, s.Providers[Other])
	}
}

// The mesh's series is the sum of its nodes', aligned on the second.
func TestMerge(t *testing.T) {
	a, b := New(), New()
	t0 := time.Unix(4_000_000, 0)
	a.Record(t0, Observation{Provider: "p", CostUSD: 1, PromptTokens: 100, CachedTokens: 50})
	b.Record(t0, Observation{Provider: "p", CostUSD: 2, PromptTokens: 300, CachedTokens: 250})
	b.Record(t0, Observation{Provider: "q", Tenant: "acme"})
	dst := a.Last(t0.Add(time.Second), 4)
	// b's clock is a second behind: its last sample is t0.
	Merge(&dst, b.Last(t0, 4))
	if got := dst.Providers["p"].CostUSD; !slices.Equal(got, []float64{0, 0, 3, 0}) {
		t.Fatalf("p's cost: %v", got)
	}
	if p := dst.Providers["p"]; !slices.Equal(p.PromptTokens, []int{0, 0, 400, 0}) || !slices.Equal(p.CachedTokens, []int{0, 0, 300, 0}) {
		t.Fatalf("p's prompt tokens %v, cached %v", p.PromptTokens, p.CachedTokens)
	}
	if got := dst.Providers["q"].Requests; !slices.Equal(got, []int{0, 0, 1, 0}) {
		t.Fatalf("q: %v", got)
	}
	if got := dst.Tenants["acme"].Requests; !slices.Equal(got, []int{0, 0, 1, 0}) {
		t.Fatalf("acme: %v", got)
	}
	// Samples outside dst's window are dropped.
	old := New()
	old.Record(t0.Add(-time.Minute), Observation{Provider: "r"})
	Merge(&dst, old.Last(t0.Add(-time.Minute), 4))
	if _, ok := dst.Providers["r"]; ok {
		t.Fatal("a sample outside the window was merged")
	}
}

func BenchmarkRecord(b *testing.B) {
	r := New()
	now := time.Unix(5_000_000, 0)
	o := Observation{Provider: "p", Tenant: "acme", Latency: time.Millisecond, CostUSD: 0.001}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		r.Record(now.Add(time.Duration(i)*time.Millisecond), o)
	}
}
