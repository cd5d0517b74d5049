package engine

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/llmesh/llmesh/sim/harness/wait"
)

func TestMain(m *testing.M) { os.Exit(wait.NoLeaks(m)) }

// vllmExposition is what vLLM v1 serves at /metrics, cut to the series
// the scraper reads and one it does not.
const vllmExposition = `# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="meta-llama/Meta-Llama-3-8B-Instruct"} 7.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="meta-llama/Meta-Llama-3-8B-Instruct"} 3.0
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="meta-llama/Meta-Llama-3-8B-Instruct"} 0.42
# HELP vllm:prefix_cache_queries_total Prefix cache queries, in terms of number of queried tokens.
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{engine="0",model_name="meta-llama/Meta-Llama-3-8B-Instruct"} %Q
# HELP vllm:prefix_cache_hits_total Prefix cache hits, in terms of number of cached tokens.
# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total{engine="0",model_name="meta-llama/Meta-Llama-3-8B-Instruct"} %H
# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{le="0.1",model_name="m"} 4.0
vllm:time_to_first_token_seconds_bucket{le="+Inf",model_name="m"} 5.0
vllm:time_to_first_token_seconds_sum{model_name="m"} 0.9
vllm:time_to_first_token_seconds_count{model_name="m"} 5.0
`

func exposition(queries, hits string) string {
	return strings.NewReplacer("%Q", queries, "%H", hits).Replace(vllmExposition)
}

// Each engine's names are read; anything else is not a reading.
func TestParse(t *testing.T) {
	for _, c := range []struct {
		name, text string
		want       Reading
	}{
		{"vllm", exposition("1000", "250"), Reading{Running: 7, Waiting: 3, KVUsage: 0.42, Hits: 250, Queries: 1000, HitRate: -1}},
		{"vllm v0", "vllm:num_requests_running 2\nvllm:num_requests_waiting 0\nvllm:gpu_cache_usage_perc 0.5\n",
			Reading{Running: 2, KVUsage: 0.5, Hits: -1, Queries: -1, HitRate: -1}},
		{"sglang", "sglang:num_running_reqs{model_name=\"m\"} 4\nsglang:num_queue_reqs{model_name=\"m\"} 9\nsglang:token_usage{model_name=\"m\"} 0.8\nsglang:cache_hit_rate{model_name=\"m\"} 0.6\n",
			Reading{Running: 4, Waiting: 9, KVUsage: 0.8, Hits: -1, Queries: -1, HitRate: 0.6}},
		{"tgi", "# TYPE tgi_batch_current_size gauge\ntgi_batch_current_size 5\n# TYPE tgi_queue_size gauge\ntgi_queue_size 1\n",
			Reading{Running: 5, Waiting: 1, Hits: -1, Queries: -1, HitRate: -1}},
		{"two models on one engine", "vllm:num_requests_running{model_name=\"a\"} 1\nvllm:num_requests_running{model_name=\"b\"} 2\nvllm:num_requests_waiting{model_name=\"a\"} 0\n",
			Reading{Running: 3, Hits: -1, Queries: -1, HitRate: -1}},
	} {
		got, err := Parse(strings.NewReader(c.text), 1<<20)
		if err != nil || got != c.want {
			t.Errorf("%s: %+v %v; want %+v", c.name, got, err, c.want)
		}
	}
	for _, bad := range []string{"<html>503 Service Unavailable</html>", "go_goroutines 12\n", "vllm:num_requests_running{ 3\n", ""} {
		if rd, err := Parse(strings.NewReader(bad), 1<<20); err == nil {
			t.Errorf("%q read as %+v", bad, rd)
		}
	}
	if _, err := Parse(strings.NewReader(exposition("1", "1")), 64); err == nil || !strings.Contains(err.Error(), "larger than 64 bytes") {
		t.Errorf("an oversize exposition: %v", err)
	}
}

// fakeEngine serves an exposition the test changes, or fails.
type fakeEngine struct {
	mu   sync.Mutex
	text string
	code int
}

func (f *fakeEngine) set(code int, text string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.code, f.text = code, text
}

func (f *fakeEngine) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	w.WriteHeader(f.code)
	_, _ = w.Write([]byte(f.text))
}

// The scraper keeps each replica's last reading, takes the prefix hit
// rate from the counters' growth between scrapes, marks a replica whose
// scrapes fail or return garbage stale (its figures kept) and fresh again
// when it answers, goes stale by age when it is not scraped, and forgets
// replicas no longer configured.
func TestScraper(t *testing.T) {
	eng := &fakeEngine{}
	eng.set(200, exposition("1000", "250"))
	srv := httptest.NewServer(eng)
	defer srv.Close()
	now := time.Unix(1000, 0)
	targets := []Target{{Provider: "gpu", Replica: 1, URL: srv.URL + "/metrics"}}
	s := New(Config{Targets: func() []Target { return targets }, Interval: time.Second, Now: func() time.Time { return now }})
	ctx := context.Background()
	if _, ok := s.Replica("gpu", 1); ok {
		t.Fatal("a load before any scrape")
	}
	s.Round(ctx)
	l, ok := s.Replica("gpu", 1)
	if !ok || l.Stale || l.Running != 7 || l.Waiting != 3 || l.KVUsage != 0.42 || l.PrefixHitRate != -1 || !l.At.Equal(now) {
		t.Fatalf("first scrape: %+v %v", l, ok)
	}
	eng.set(200, exposition("3000", "1750"))
	s.Round(ctx)
	if l, _ := s.Replica("gpu", 1); l.PrefixHitRate != 0.75 {
		t.Fatalf("hit rate %v; want (1750-250)/(3000-1000)", l.PrefixHitRate)
	}
	for i, fail := range []func(){
		func() { eng.set(503, "overloaded") },
		func() { eng.set(200, "<html>not metrics</html>") },
	} {
		fail()
		s.Round(ctx)
		if l, _ := s.Replica("gpu", 1); l.Stale || l.Running != 7 {
			t.Fatalf("case %d: one failed scrape: %+v; want the last reading, not yet stale", i, l)
		}
		s.Round(ctx)
		if l, _ := s.Replica("gpu", 1); !l.Stale || l.Running != 7 {
			t.Fatalf("case %d: two failed scrapes: %+v; want the last reading, stale", i, l)
		}
		eng.set(200, exposition("3000", "1750"))
		s.Round(ctx)
		if l, _ := s.Replica("gpu", 1); l.Stale {
			t.Fatalf("case %d: answering again: %+v", i, l)
		}
	}
	now = now.Add(4 * time.Second)
	if l, _ := s.Replica("gpu", 1); !l.Stale {
		t.Fatalf("a reading four intervals old: %+v", l)
	}
	targets = nil
	s.Round(ctx)
	if _, ok := s.Replica("gpu", 1); ok {
		t.Fatal("a replica no longer configured is still known")
	}
}

// A scrape that hangs is cut at the timeout and never holds the round
// past it.
func TestScrapeTimeout(t *testing.T) {
	block := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-block:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(block)
	s := New(Config{Targets: func() []Target { return []Target{{Provider: "p", URL: srv.URL}} }, Interval: 200 * time.Millisecond, StaleAfter: 1})
	start := time.Now()
	s.Round(context.Background())
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("the round took %v", took)
	}
	if l, ok := s.Replica("p", 0); !ok || !l.Stale {
		t.Fatalf("%+v %v", l, ok)
	}
}
