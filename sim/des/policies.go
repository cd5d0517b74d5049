package des

import (
	"time"

	"github.com/llmesh/llmesh/route"
)

// The baseline policies, ordering the same filtered targets as llmesh's.

// roundRobin rotates through the providers, one step a request, blind to
// price and speed.
type roundRobin struct {
	index map[string]int
	n     int
	next  int
}

func (*roundRobin) Name() string { return "round-robin" }

func (p *roundRobin) Less(_ *route.Request, a, b *route.Target) bool {
	ra := (p.index[a.Provider()] - p.next%p.n + p.n) % p.n
	rb := (p.index[b.Provider()] - p.next%p.n + p.n) % p.n
	return ra < rb
}

// cheapestFirst orders by expected price alone.
type cheapestFirst struct{}

func (cheapestFirst) Name() string { return "cheapest-first" }

func (cheapestFirst) Less(_ *route.Request, a, b *route.Target) bool {
	if a.Cost != b.Cost {
		return a.Cost < b.Cost
	}
	return a.Provider() < b.Provider()
}

// latencyFirst orders by observed latency (unobserved counts as fast).
type latencyFirst struct{}

func (latencyFirst) Name() string { return "latency-first" }

func (latencyFirst) Less(req *route.Request, a, b *route.Target) bool {
	la, lb := a.Health.Latency+a.ViaRTT, b.Health.Latency+b.ViaRTT
	if req.Chat.Stream {
		la, lb = a.Health.TTFT+a.ViaRTT, b.Health.TTFT+b.ViaRTT
	}
	if la != lb {
		return la < lb
	}
	return a.Provider() < b.Provider()
}

type event struct {
	t   time.Duration
	seq uint64
	fn  func()
}

type eventHeap []*event

func (h eventHeap) Len() int { return len(h) }
func (h eventHeap) Less(i, j int) bool {
	if h[i].t != h[j].t {
		return h[i].t < h[j].t
	}
	return h[i].seq < h[j].seq
}
func (h eventHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *eventHeap) Push(x any)   { *h = append(*h, x.(*event)) }
func (h *eventHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}
