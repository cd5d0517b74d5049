// Package engine reads what self-hosted inference engines (vLLM, SGLang,
// TGI) report of their load: a Scraper polls each replica's Prometheus
// metrics endpoint off the request path and keeps the last reading as a
// route.EngineLoad, marked stale when scrapes fail or return nothing
// usable, so that routing falls back to the node's own in-flight counts
// and never waits for a scrape.
package engine

import (
	"errors"
	"fmt"
	"io"
	"math"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// The metric names each engine exports, in the order they are tried:
// vLLM's v1 names (and v0's KV gauge), SGLang's and TGI's. A counter is
// found with or without its _total suffix.
var (
	runningNames = []string{"vllm:num_requests_running", "sglang:num_running_reqs", "tgi_batch_current_size"}
	waitingNames = []string{"vllm:num_requests_waiting", "sglang:num_queue_reqs", "tgi_queue_size"}
	kvNames      = []string{"vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "sglang:token_usage"}
	hitNames     = []string{"vllm:prefix_cache_hits", "vllm:gpu_prefix_cache_hits"}
	queryNames   = []string{"vllm:prefix_cache_queries", "vllm:gpu_prefix_cache_queries"}
	hitRateNames = []string{"sglang:cache_hit_rate"}
)

// errNothingUsable is a scrape that parsed but names none of the
// engines' load metrics: a server that is not an engine, or one that
// renamed them.
var errNothingUsable = errors.New("no queue or running-requests metric of vLLM, SGLang or TGI")

// Reading is one scrape's figures: the load, and the prefix-cache
// counters a hit rate is the difference of between two scrapes.
type Reading struct {
	Running, Waiting int
	KVUsage          float64
	Hits, Queries    float64 // cumulative prefix-cache tokens; negative when not reported
	HitRate          float64 // an engine's own gauge of it (SGLang); negative when not reported
}

// Parse reads a Prometheus text exposition of at most limit bytes. Every
// series of a metric counts: running and waiting requests are summed over
// an engine's models, KV usage is the most any reports.
func Parse(r io.Reader, limit int64) (Reading, error) {
	lr := &io.LimitedReader{R: r, N: limit + 1}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(lr)
	if lr.N <= 0 {
		return Reading{}, fmt.Errorf("the exposition is larger than %d bytes", limit)
	}
	if err != nil {
		return Reading{}, fmt.Errorf("not a Prometheus text exposition: %w", err)
	}
	rd := Reading{Hits: -1, Queries: -1, HitRate: -1}
	running, okR := sum(fams, runningNames)
	waiting, okW := sum(fams, waitingNames)
	if !okR && !okW {
		return Reading{}, errNothingUsable
	}
	rd.Running, rd.Waiting = count(running), count(waiting)
	if v, ok := most(fams, kvNames); ok {
		rd.KVUsage = min(max(v, 0), 1)
	}
	if v, ok := sum(fams, hitNames); ok {
		rd.Hits = v
	}
	if v, ok := sum(fams, queryNames); ok {
		rd.Queries = v
	}
	if v, ok := most(fams, hitRateNames); ok {
		rd.HitRate = min(max(v, 0), 1)
	}
	return rd, nil
}

// count is a gauge's value as a count of requests.
func count(v float64) int {
	if math.IsNaN(v) || v < 0 {
		return 0
	}
	return int(math.Min(v, 1<<30))
}

// family returns the first of names the exposition has, a counter's with
// or without its _total suffix.
func family(fams map[string]*dto.MetricFamily, names []string) *dto.MetricFamily {
	for _, n := range names {
		if f, ok := fams[n]; ok {
			return f
		}
		if f, ok := fams[n+"_total"]; ok {
			return f
		}
	}
	return nil
}

// value is a series' number, whatever the metric's type.
func value(m *dto.Metric) (float64, bool) {
	switch {
	case m.Gauge != nil:
		return m.Gauge.GetValue(), true
	case m.Counter != nil:
		return m.Counter.GetValue(), true
	case m.Untyped != nil:
		return m.Untyped.GetValue(), true
	}
	return 0, false
}

// sum adds the series of the first of names present.
func sum(fams map[string]*dto.MetricFamily, names []string) (float64, bool) {
	f := family(fams, names)
	if f == nil {
		return 0, false
	}
	total, any := 0.0, false
	for _, m := range f.Metric {
		if v, ok := value(m); ok && !math.IsNaN(v) {
			total, any = total+v, true
		}
	}
	return total, any
}

// most is the largest series of the first of names present.
func most(fams map[string]*dto.MetricFamily, names []string) (float64, bool) {
	f := family(fams, names)
	if f == nil {
		return 0, false
	}
	top, any := math.Inf(-1), false
	for _, m := range f.Metric {
		if v, ok := value(m); ok && !math.IsNaN(v) {
			top, any = math.Max(top, v), true
		}
	}
	return top, any
}
