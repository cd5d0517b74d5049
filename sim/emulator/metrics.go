package emulator

import (
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// vLLM's metric names and help, as its V1 engine exports them
// (vllm/v1/metrics/loggers.py); its Python client adds _total to
// counters. Every series has vLLM's labels: model_name, the served
// model, and engine, the engine core's index ("0").
var (
	engineLabels  = []string{"model_name", "engine"}
	descRunning   = prometheus.NewDesc("vllm:num_requests_running", "Number of requests in model execution batches.", engineLabels, nil)
	descWaiting   = prometheus.NewDesc("vllm:num_requests_waiting", "Number of requests waiting to be processed.", engineLabels, nil)
	descKVUsage   = prometheus.NewDesc("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", engineLabels, nil)
	descQueries   = prometheus.NewDesc("vllm:prefix_cache_queries_total", "Prefix cache queries, in terms of number of queried tokens.", engineLabels, nil)
	descHits      = prometheus.NewDesc("vllm:prefix_cache_hits_total", "Prefix cache hits, in terms of number of cached tokens.", engineLabels, nil)
	descPrompt    = prometheus.NewDesc("vllm:prompt_tokens_total", "Number of prefill tokens processed.", engineLabels, nil)
	descGenerated = prometheus.NewDesc("vllm:generation_tokens_total", "Number of generation tokens processed.", engineLabels, nil)
	descPreempted = prometheus.NewDesc("vllm:num_preemptions_total", "Cumulative number of preemption from the engine.", engineLabels, nil)
	descCacheInfo = prometheus.NewDesc("vllm:cache_config_info", "Information of the LLMEngine CacheConfig",
		[]string{"block_size", "enable_prefix_caching", "engine", "num_gpu_blocks"}, nil)
)

// ttftBuckets are vLLM's buckets of vllm:time_to_first_token_seconds.
var ttftBuckets = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0}

// metrics is an emulator's Prometheus registry, of its own (never the
// global one): what GET /metrics serves, under vLLM's names, so that a
// node scrapes an emulator as it would a vLLM server.
type metrics struct {
	reg     *prometheus.Registry
	ttft    *prometheus.HistogramVec
	handler http.Handler
}

func newMetrics(e *Emulator) *metrics {
	m := &metrics{reg: prometheus.NewRegistry()}
	m.ttft = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "vllm:time_to_first_token_seconds", Help: "Histogram of time to first token in seconds.", Buckets: ttftBuckets,
	}, engineLabels)
	m.reg.MustRegister(engineCollector{e}, m.ttft)
	m.handler = promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})
	return m
}

// observeTTFT records a request's time to its first token.
func (e *Emulator) observeTTFT(d time.Duration) {
	e.metrics.ttft.WithLabelValues(e.cfg.Load().servedModel(), "0").Observe(d.Seconds())
}

// servedModel is the model_name label: the first model served, else the
// emulator's name.
func (c *Config) servedModel() string {
	if names := c.modelNames(); len(names) > 0 {
		return names[0]
	}
	return c.Name
}

// engineCollector reads the engines at each scrape: the load and the
// counters of every engine the emulator has had (after SetConfig
// replaced one, the old one finishes its requests), and the cache of the
// current one; zeros without an engine.
type engineCollector struct{ e *Emulator }

func (c engineCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descRunning, descWaiting, descKVUsage, descQueries, descHits, descPrompt, descGenerated, descPreempted, descCacheInfo} {
		ch <- d
	}
}

func (c engineCollector) Collect(ch chan<- prometheus.Metric) {
	e := c.e
	var running, waiting int
	var kv float64
	var queries, hits, generated int64
	e.engMu.Lock()
	runners, current := slices.Clone(e.runners), e.cur.Load()
	e.engMu.Unlock()
	for _, g := range runners {
		l, s := g.load()
		running += l.Running
		waiting += l.Waiting
		if g == current {
			kv = l.KVUsage
		}
		queries += s.PrefixQueries
		hits += s.PrefixHits
		generated += s.GenerationTokens
	}
	model := e.cfg.Load().servedModel()
	gauge := func(d *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, model, "0")
	}
	counter := func(d *prometheus.Desc, v int64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), model, "0")
	}
	gauge(descRunning, float64(running))
	gauge(descWaiting, float64(waiting))
	gauge(descKVUsage, kv)
	counter(descQueries, queries)
	counter(descHits, hits)
	counter(descPrompt, queries) // the prompt tokens of the requests admitted, each looked up once
	counter(descGenerated, generated)
	counter(descPreempted, 0) // blocks are reserved at admission: nothing is preempted
	if current != nil {
		cfg := current.eng.Config()
		ch <- prometheus.MustNewConstMetric(descCacheInfo, prometheus.GaugeValue, 1,
			strconv.Itoa(cfg.BlockTokens), "True", "0", strconv.Itoa(cfg.KVBlocks))
	}
}

// serveMetrics answers GET /metrics: no key, no latency, not counted as
// an API request; it hangs in ModeHang as the rest of a hung server does
// (ModeRefuse has no listener), and answers in ModeError and ModeCut,
// whose failures are the API's.
func (e *Emulator) serveMetrics(w http.ResponseWriter, r *http.Request) {
	if e.Mode() == ModeHang {
		select {
		case <-r.Context().Done():
			return
		case <-e.stopping:
			panic(http.ErrAbortHandler)
		}
	}
	e.metrics.handler.ServeHTTP(w, r)
}
