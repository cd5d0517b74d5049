package emulator

import (
	"bufio"
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/llmesh/llmesh/sim/harness/wait"
)

// scrape reads GET /metrics as Prometheus does, into metric families.
func scrape(t *testing.T, c *http.Client, e *Emulator) map[string]*dto.MetricFamily {
	t.Helper()
	resp := do(t, c, "GET", e.URL()+"/metrics", "")
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %d", resp.StatusCode)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	mf, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parsing /metrics: %v", err)
	}
	return mf
}

// value is the value of the one series of family name, checking vLLM's
// labels on it; -1 when the family is missing.
func value(t *testing.T, mf map[string]*dto.MetricFamily, name, model string) float64 {
	t.Helper()
	f := mf[name]
	if f == nil || len(f.Metric) != 1 {
		return -1
	}
	m := f.Metric[0]
	labels := map[string]string{}
	for _, l := range m.Label {
		labels[l.GetName()] = l.GetValue()
	}
	if labels["model_name"] != model || labels["engine"] != "0" {
		t.Errorf("%s labels %v, want model_name %q and engine 0", name, labels, model)
	}
	switch {
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Histogram != nil:
		return float64(m.Histogram.GetSampleCount())
	}
	return -1
}

// cacheLabel is label name of vllm:cache_config_info; "" without it.
func cacheLabel(mf map[string]*dto.MetricFamily, name string) string {
	f := mf["vllm:cache_config_info"]
	if f == nil || len(f.Metric) != 1 {
		return ""
	}
	for _, l := range f.Metric[0].Label {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// GET /metrics shows the engine under vLLM's names: a full batch's
// queue, the KV cache in use, prefix cache queries and hits. A client
// that goes away frees its place: a waiting one leaves the queue, a
// running one lets the next in.
func TestMetricsShowTheEngine(t *testing.T) {
	eng := fastEngine()
	eng.MaxRunning, eng.DecodeBase = 1, 5*time.Millisecond
	cfg := engineConfig(eng)
	cfg.Models = map[string]Price{"llama-3.1-8b": {}}
	e := start(t, cfg)
	c := newClient(t)
	const M = "llama-3.1-8b"
	var cancels []context.CancelFunc
	var streams []*bufio.Reader
	for i := range 3 {
		ctx, cancel := context.WithCancel(context.Background())
		cancels = append(cancels, cancel)
		defer cancel()
		b := `{"model":"llama-3.1-8b","stream":true,"max_tokens":20000,"messages":[{"role":"system","content":` + jsonString(prefixText(5, 300)) + `},{"role":"user","content":"q` + string(rune('a'+i)) + `"}]}`
		resp := doCtx(t, ctx, c, "POST", e.URL()+"/v1/chat/completions", b)
		defer resp.Body.Close()
		streams = append(streams, bufio.NewReader(resp.Body))
	}
	// firstToken reads a stream up to its first chunk: the request ran.
	firstToken := func(i int) {
		for {
			line, err := streams[i].ReadString('\n')
			if err != nil {
				t.Fatalf("stream %d: %v", i, err)
			}
			if strings.HasPrefix(line, "data: {") {
				return
			}
		}
	}
	gauges := func(running, waiting float64) func() bool {
		return func() bool {
			mf := scrape(t, c, e)
			return value(t, mf, "vllm:num_requests_running", M) == running && value(t, mf, "vllm:num_requests_waiting", M) == waiting
		}
	}
	wait.For(t, 10*time.Second, "one request running and two waiting", gauges(1, 2))
	firstToken(0)
	mf := scrape(t, c, e)
	if kv := value(t, mf, "vllm:kv_cache_usage_perc", M); kv <= 0 || kv > 1 {
		t.Errorf("kv_cache_usage_perc %v while a request runs", kv)
	}
	if cacheLabel(mf, "block_size") != "16" || cacheLabel(mf, "num_gpu_blocks") != "4096" {
		t.Errorf("vllm:cache_config_info %v", mf["vllm:cache_config_info"])
	}

	cancels[2]()
	wait.For(t, 10*time.Second, "the waiting request that went away to leave the queue", gauges(1, 1))
	cancels[0]()
	wait.For(t, 10*time.Second, "the next request to run once the running one went away", gauges(1, 0))
	firstToken(1)
	cancels[1]()
	wait.For(t, 10*time.Second, "an idle engine", gauges(0, 0))

	mf = scrape(t, c, e)
	if kv := value(t, mf, "vllm:kv_cache_usage_perc", M); kv != 0 {
		t.Errorf("kv_cache_usage_perc %v with nothing running", kv)
	}
	queries, hits := value(t, mf, "vllm:prefix_cache_queries_total", M), value(t, mf, "vllm:prefix_cache_hits_total", M)
	if queries < 600 || hits < 288 || hits >= queries {
		t.Errorf("prefix cache queries %v, hits %v: want two prompts of over 300 tokens, the second finding the first's system prompt", queries, hits)
	}
	if n := value(t, mf, "vllm:time_to_first_token_seconds", M); n != 2 {
		t.Errorf("time_to_first_token_seconds has %v observations, want 2", n)
	}
	if g := value(t, mf, "vllm:generation_tokens_total", M); g < 2 {
		t.Errorf("generation_tokens_total %v", g)
	}
}

// Without an engine /metrics is still served, all zeros, so that a node
// can scrape any emulator; it takes no key and is not an API request.
func TestMetricsWithoutEngine(t *testing.T) {
	cfg := DefaultConfig()
	cfg.APIKey = "k"
	e := start(t, cfg)
	mf := scrape(t, newClient(t), e)
	for _, name := range []string{"vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc", "vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total"} {
		if v := value(t, mf, name, "emulator"); v != 0 {
			t.Errorf("%s = %v, want 0", name, v)
		}
	}
	if s := e.Stats(); s.Requests != 0 {
		t.Errorf("a scrape counted as %d API requests", s.Requests)
	}
}

// SetConfig with another Engine starts a new, empty engine, as a
// restarted server: nothing is cached any more, and /metrics' counters,
// which add up every engine the emulator has had, never go down;
// without an engine the gauges are zero again.
func TestSetConfigReplacesTheEngine(t *testing.T) {
	e := start(t, engineConfig(fastEngine()))
	c := newClient(t)
	b := body("m", "")
	b = strings.Replace(b, `"messages":[`, `"messages":[{"role":"system","content":`+jsonString(prefixText(11, 400))+`},`, 1)
	cached := func() int {
		return decodeResponse(t, readAll(t, do(t, c, "POST", e.URL()+"/v1/chat/completions", b), http.StatusOK)).Usage.PromptTokensDetails["cached_tokens"]
	}
	cached()
	if n := cached(); n < 400 {
		t.Fatalf("the same prompt again: %d cached", n)
	}
	before := value(t, scrape(t, c, e), "vllm:prefix_cache_queries_total", "emulator")
	cfg := e.Config()
	cfg.Engine.KVBlocks = 2048
	if err := e.SetConfig(cfg); err != nil {
		t.Fatal(err)
	}
	if n := cached(); n != 0 {
		t.Errorf("after a new engine: %d cached, want 0", n)
	}
	mf := scrape(t, c, e)
	if after := value(t, mf, "vllm:prefix_cache_queries_total", "emulator"); after <= before {
		t.Errorf("prefix_cache_queries_total went from %v to %v across the new engine", before, after)
	}
	if blocks := cacheLabel(mf, "num_gpu_blocks"); blocks != "2048" {
		t.Errorf("cache_config_info num_gpu_blocks %q, want the new engine's 2048", blocks)
	}
	cfg.Engine = nil
	if err := e.SetConfig(cfg); err != nil {
		t.Fatal(err)
	}
	if n := cached(); n != 0 {
		t.Errorf("without an engine: %d cached", n)
	}
	if mf := scrape(t, c, e); mf["vllm:cache_config_info"] != nil || value(t, mf, "vllm:prefix_cache_queries_total", "emulator") < before {
		t.Errorf("without an engine: %v", mf["vllm:cache_config_info"])
	}
}
