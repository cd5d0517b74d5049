package des

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"
)

// fleet loads the engine scenario, shortened, with change applied.
func fleet(t *testing.T, change func(*Scenario)) *Result {
	t.Helper()
	s, err := LoadScenario("../scenarios/gpu-fleet-engines.yaml")
	if err != nil {
		t.Fatal(err)
	}
	s.Duration = 15 * time.Minute
	if change != nil {
		change(s)
	}
	r, err := RunPolicy(s, "cheapest-first")
	if err != nil {
		t.Fatal(err)
	}
	if r.OK == 0 || r.OK != r.Requests {
		t.Fatalf("%d of %d requests answered", r.OK, r.Requests)
	}
	return r
}

// Providers whose replicas are engines make locality and load matter as
// on GPUs: a shared system prompt raises the prefix hit rate; more load
// than the fleet computes queues (TTFT rises many times) and a smaller
// cache evicts (the hit rate falls).
func TestEngineProviders(t *testing.T) {
	base := fleet(t, nil)
	noShared := fleet(t, func(s *Scenario) { s.Workload.SharedPrefixTokens = 0 })
	hot := fleet(t, func(s *Scenario) {
		s.Workload.SessionsPerHour *= 8
		s.Providers[0].Engine.KVBlocks = 2000
	})
	t.Logf("hit rate %.3f, without a shared prefix %.3f, hot and small %.3f; TTFT p90 %.0fms, hot %.0fms",
		base.PrefixHitRate, noShared.PrefixHitRate, hot.PrefixHitRate, base.TTFTP90, hot.TTFTP90)
	if base.PrefixHitRate <= noShared.PrefixHitRate+0.05 {
		t.Errorf("hit rate %.3f with a shared system prompt, %.3f without: the prompt should be found", base.PrefixHitRate, noShared.PrefixHitRate)
	}
	if hot.PrefixHitRate >= base.PrefixHitRate-0.05 {
		t.Errorf("hit rate %.3f with eight times the sessions on half the cache, %.3f before: eviction should cost hits", hot.PrefixHitRate, base.PrefixHitRate)
	}
	if hot.TTFTP90 < 3*base.TTFTP90 {
		t.Errorf("TTFT p90 %.0fms under eight times the load, %.0fms before: a saturated batch should queue", hot.TTFTP90, base.TTFTP90)
	}
}

// Engines keep runs deterministic: the same scenario and seed, the same
// bytes.
func TestEngineRunsAreDeterministic(t *testing.T) {
	var out [2][]byte
	for i := range out {
		r := fleet(t, nil)
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		out[i] = b
	}
	if !bytes.Equal(out[0], out[1]) {
		t.Error("two runs of one scenario and seed differ")
	}
}

func TestEngineSpecChecked(t *testing.T) {
	for _, spec := range []string{
		`{preset: gpt-5}`,
		`{preset: llama-3.1-8b-h100, max_running: -1}`,
		`{kv_blocks: 100}`, // no speed
	} {
		y := []byte(`name: x
duration: 1h
regions: [{name: r, jurisdiction: eu}]
providers:
  - {name: p, region: r, models: [{name: m}], engine: ` + spec + `}
tenants: [{name: t}]
workload: {sessions_per_hour: 10, prompt_tokens: {median: 10, p99: 20}, completion_tokens: {median: 10, p99: 20}, models: [{name: m, weight: 1}]}
`)
		if _, err := ParseScenario(y); err == nil {
			t.Errorf("engine %s accepted", spec)
		}
	}
}
