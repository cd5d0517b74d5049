package bench

import (
	"context"
	"testing"
	"time"

	"github.com/llmesh/llmesh/sim/emulator"
	"github.com/llmesh/llmesh/sim/engine"
)

// The shared-prefix workload against two in-process engine replicas,
// each tenant pinned to one (the oracle's routing): every turn is
// answered, and the later turns of a conversation find its earlier ones
// in the cache. No timing is asserted.
func TestRunPrefixPinned(t *testing.T) {
	var urls []string
	for range 2 {
		cfg := emulator.DefaultConfig()
		eng := engine.Llama8BOnH100()
		eng.KVBlocks = 2000
		cfg.Engine = &eng
		urls = append(urls, startEmulator(t, cfg).URL()+"/v1")
	}
	cfg := DefaultPrefixConfig()
	cfg.Tenants, cfg.PrefixWords, cfg.Turns, cfg.MaxTokens, cfg.Rate = 3, 300, 3, 8, 30
	cfg.Duration, cfg.Drain = 500*time.Millisecond, 10*time.Second
	rs, err := RunPrefix(context.Background(), cfg, []PrefixTarget{{Name: "oracle", Replicas: urls}})
	if err != nil {
		t.Fatal(err)
	}
	r := rs[0]
	// 5 conversations start in 500 ms at 10 a second; all their turns
	// are begun within the duration or not at all.
	if r.Requests < 5 || r.OK != r.Requests || r.TTFT50 <= 0 || r.TTFT90 < r.TTFT50 || r.OutputTPS <= 0 {
		t.Fatalf("%+v", r)
	}
	if r.CachedTokens == 0 || r.HitRate <= 0 || r.HitRate >= 1 || r.PromptTokens < int64(r.OK)*300 {
		t.Fatalf("no cache hit, or more than the prompts: %+v", r)
	}
}
