package des

import (
	"testing"
	"time"
)

// spill runs the spill-over scenario under llmesh's policy, with change
// applied.
func spill(t *testing.T, change func(*Scenario)) *Result {
	t.Helper()
	s, err := LoadScenario("../scenarios/spill-over.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if change != nil {
		change(s)
		if err := s.Check(); err != nil {
			t.Fatal(err)
		}
	}
	r, err := RunPolicy(s, "llmesh")
	if err != nil {
		t.Fatal(err)
	}
	if r.OK != r.Requests || len(r.Phases) != 3 {
		t.Fatalf("%d of %d requests answered, %d phases", r.OK, r.Requests, len(r.Phases))
	}
	if r.ServedBy["cloud-us"] != 0 || r.ResidencyViolations != 0 {
		t.Fatalf("an eu tenant's request went to the us cloud: %v", r.ServedBy)
	}
	return r
}

// share is provider's share of a phase's answers.
func share(p PhaseResult, provider string) float64 {
	total := 0
	for _, n := range p.ServedBy {
		total += n
	}
	return float64(p.ServedBy[provider]) / float64(max(total, 1))
}

// Local GPUs first, a compliant cloud while they are full, and back, as
// the planner sees the engines through their scraped metrics: with room,
// every request is the GPUs'; at four times what they serve, the eu
// cloud takes what their queues would make wait past max_ttft; once they
// drain, the GPUs have it all again. The us cloud, cheapest of all, is
// never used (spill checks it). Without max_ttft nothing spills: the
// queues grow, and the first tokens come many times later.
func TestSpillOverScenario(t *testing.T) {
	r := spill(t, nil)
	for i, p := range r.Phases {
		t.Logf("phase %d (%s-%s): %d requests, served by %v", i+1, p.Start, p.End, p.Requests, p.ServedBy)
	}
	if g := share(r.Phases[0], "gpu"); g != 1 {
		t.Errorf("with room, the GPUs served %.0f%%, want all", 100*g)
	}
	if c := share(r.Phases[1], "cloud-eu"); c < 0.3 || c > 0.8 {
		t.Errorf("saturated, the eu cloud served %.0f%%: the GPUs should serve what they can and the cloud the rest", 100*c)
	}
	if g := share(r.Phases[2], "gpu"); g < 0.9 {
		t.Errorf("drained, the GPUs served %.0f%%, want (nearly) all", 100*g)
	}
	queued := spill(t, func(s *Scenario) { s.Tenants[0].MaxTTFT = 0 })
	if queued.ServedBy["cloud-eu"] != 0 {
		t.Errorf("without max_ttft, %d requests went to the dearer cloud", queued.ServedBy["cloud-eu"])
	}
	if queued.TTFTP90 < 3*r.TTFTP90 {
		t.Errorf("TTFT p90 %.0fms without max_ttft, %.0fms with: the queue should have grown", queued.TTFTP90, r.TTFTP90)
	}
}

// A trace replaces the Poisson arrivals: one session at each offset,
// each counted in the phase it arrived in.
func TestTraceArrivals(t *testing.T) {
	trace := []time.Duration{0, time.Second, time.Second, 25 * time.Second, 89 * time.Second}
	r := spill(t, func(s *Scenario) { s.Workload.Trace = trace })
	if r.Requests != len(trace) {
		t.Fatalf("%d requests from a trace of %d", r.Requests, len(trace))
	}
	if got := []int{r.Phases[0].Requests, r.Phases[1].Requests, r.Phases[2].Requests}; got[0] != 3 || got[1] != 1 || got[2] != 1 {
		t.Fatalf("requests by phase %v, want [3 1 1]", got)
	}
	for _, bad := range [][]time.Duration{{time.Second, 0}, {-time.Second}} {
		s, err := LoadScenario("../scenarios/spill-over.yaml")
		if err != nil {
			t.Fatal(err)
		}
		s.Workload.Trace = bad
		if err := s.Check(); err == nil {
			t.Errorf("trace %v accepted", bad)
		}
	}
}
