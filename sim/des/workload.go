package des

import (
	"fmt"
	"math"
	"time"
)

// rate is the session arrival rate at virtual time t, per second.
func (w *world) rate(t time.Duration) float64 {
	r := w.s.Workload.SessionsPerHour / 3600
	if sh := w.s.Workload.DailyShape; len(sh) == 24 {
		r *= sh[int(t.Hours())%24]
	}
	if ph := w.s.Workload.Phases; len(ph) > 0 {
		r *= ph[w.phase(t)].Factor
	}
	return r
}

// phase is the index of the workload phase at virtual time t (the last
// past the end of the phases).
func (w *world) phase(t time.Duration) int {
	ph := w.s.Workload.Phases
	for i := range ph {
		if t < ph[i].Duration {
			return i
		}
		t -= ph[i].Duration
	}
	return len(ph) - 1
}

// nextArrival draws the next session arrival after t (a Poisson process
// with a time-varying rate, by thinning), or takes it from the trace.
func (w *world) nextArrival(t time.Duration) time.Duration {
	if tr := w.s.Workload.Trace; len(tr) > 0 {
		if w.traced == len(tr) {
			return w.s.Duration
		}
		w.traced++
		return tr[w.traced-1]
	}
	peak := w.s.Workload.SessionsPerHour / 3600
	if len(w.s.Workload.Phases) > 0 {
		peak = 0
	}
	for _, f := range w.s.Workload.DailyShape {
		peak = math.Max(peak, w.s.Workload.SessionsPerHour/3600*f)
	}
	for _, ph := range w.s.Workload.Phases {
		peak = math.Max(peak, w.s.Workload.SessionsPerHour/3600*ph.Factor)
	}
	if peak == 0 {
		return w.s.Duration
	}
	for {
		t += time.Duration(w.wl.ExpFloat64() / peak * float64(time.Second))
		if t >= w.s.Duration || w.wl.Float64()*peak <= w.rate(t) {
			return t
		}
	}
}

// session is one client's conversation: its requests share a key.
type session struct {
	id     uint64     // identifies its conversation to the engines' caches
	blocks blockChain // its tokens' block hashes, as far as a turn needed them
	key    string     // its affinity key
	tenant *TenantSpec
	node   *simNode
	model  string
	stream bool
	left   int
}

func (w *world) arrive() {
	if w.now >= w.s.Duration {
		return
	}
	w.reqID++
	s := &session{id: w.reqID, key: fmt.Sprintf("s%d", w.reqID), tenant: w.pickTenant()}
	regions := s.tenant.Regions
	if len(regions) == 0 {
		for _, r := range w.s.Regions {
			regions = append(regions, r.Name)
		}
	}
	nodes := w.byRegion[regions[w.wl.IntN(len(regions))]]
	s.node = nodes[w.wl.IntN(len(nodes))]
	s.model = w.pickModel()
	s.stream = w.wl.Float64() < w.s.Workload.Stream
	s.left = 1
	for w.wl.Float64() < 1-1/w.s.Workload.Turns {
		s.left++
	}
	w.at(w.now, func() { w.turn(s, 0) })
	w.at(w.nextArrival(w.now), func() { w.arrive() })
}

func (w *world) pickTenant() *TenantSpec {
	total := 0.0
	for _, t := range w.s.Tenants {
		total += t.Weight
	}
	x := w.wl.Float64() * total
	for i := range w.s.Tenants {
		if x -= w.s.Tenants[i].Weight; x < 0 {
			return &w.s.Tenants[i]
		}
	}
	return &w.s.Tenants[len(w.s.Tenants)-1]
}

func (w *world) pickModel() string {
	total := 0.0
	for _, m := range w.s.Workload.Models {
		total += m.Weight
	}
	x := w.wl.Float64() * total
	for _, m := range w.s.Workload.Models {
		if x -= m.Weight; x < 0 {
			return m.Name
		}
	}
	return w.s.Workload.Models[len(w.s.Workload.Models)-1].Name
}

// lognormal draws from the log-normal with median m and 99th percentile
// p99, given a standard normal z.
func lognormal(m, p99, z float64) float64 {
	if p99 <= m {
		return m
	}
	return m * math.Exp(z*math.Log(p99/m)/2.3263478740408408)
}

// turn is one request of a session; the next is drawn now, from the
// workload's stream, whatever this one's fate.
func (w *world) turn(s *session, i int) {
	prompt := int(lognormal(float64(w.s.Workload.PromptTokens.Median), float64(w.s.Workload.PromptTokens.P99), w.wl.NormFloat64()))
	completion := int(lognormal(float64(w.s.Workload.CompletionTokens.Median), float64(w.s.Workload.CompletionTokens.P99), w.wl.NormFloat64()))
	w.reqID++
	id := w.reqID
	if i+1 < s.left {
		think := time.Duration(w.wl.ExpFloat64() * float64(w.s.Workload.ThinkTime))
		w.at(w.now+think, func() { w.turn(s, i+1) })
	}
	w.serve(s, i, id, max(prompt, 1), max(completion, 1))
}

func inWindow(ws []Window, t time.Duration) bool {
	for _, x := range ws {
		if t >= x.Start && t < x.End {
			return true
		}
	}
	return false
}

// uniform and normal are a request attempt's own random draws: the same
// under every policy, whatever order the others ran in.
func (w *world) uniform(id uint64, attempt int) float64 {
	return float64(splitmix(w.s.Seed^id*0x9e3779b97f4a7c15^uint64(attempt)<<56)>>11) / (1 << 53)
}

func (w *world) normal(id uint64, attempt int) float64 {
	u1 := math.Max(w.uniform(id, attempt+16), 1e-12)
	u2 := w.uniform(id, attempt+32)
	return math.Sqrt(-2*math.Log(u1)) * math.Cos(2*math.Pi*u2)
}

func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}
