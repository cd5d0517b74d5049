package engine

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/llmesh/llmesh/route"
)

// Defaults of a Scraper's Config.
const (
	DefaultInterval = time.Second
	// DefaultMaxBytes bounds one exposition: vLLM's, with its
	// histograms, is a few hundred KiB.
	DefaultMaxBytes = 4 << 20
	// DefaultStaleAfter is how many scrapes in a row may fail before a
	// replica's figures are stale.
	DefaultStaleAfter = 2
	// scrapesAtOnce bounds the replicas scraped at the same time.
	scrapesAtOnce = 8
)

// Target is one replica's metrics endpoint.
type Target struct {
	Provider string
	Replica  int
	URL      string
}

// Config is what a Scraper scrapes and how often.
type Config struct {
	// Targets is read every round, so that a reload's providers are
	// followed.
	Targets  func() []Target
	Interval time.Duration // between rounds; DefaultInterval when 0
	// Timeout bounds one scrape; half the interval when 0.
	Timeout    time.Duration
	MaxBytes   int64 // DefaultMaxBytes when 0
	StaleAfter int   // DefaultStaleAfter when 0
	Client     *http.Client
	Now        func() time.Time
	Log        *slog.Logger
}

// Scraper polls every target each interval and keeps its last reading.
// It implements route.EngineSignals and prometheus.Collector.
type Scraper struct {
	cfg   Config
	mu    sync.RWMutex
	state map[key]*replica
}

type key struct {
	provider string
	replica  int
}

// replica is what the scrapes of one replica left.
type replica struct {
	load     route.EngineLoad
	last     Reading // the last good reading
	good     bool    // some scrape succeeded
	fails    int     // scrapes failed in a row
	ok, errs uint64  // scrapes by result, for the metrics
	lastErr  string
}

// New returns a Scraper of cfg's targets; Run starts it.
func New(cfg Config) *Scraper {
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = cfg.Interval / 2
	}
	if cfg.MaxBytes <= 0 {
		cfg.MaxBytes = DefaultMaxBytes
	}
	if cfg.StaleAfter <= 0 {
		cfg.StaleAfter = DefaultStaleAfter
	}
	if cfg.Client == nil {
		cfg.Client = &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	return &Scraper{cfg: cfg, state: map[key]*replica{}}
}

// Run scrapes every interval until stop is closed.
func (s *Scraper) Run(stop <-chan struct{}) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-stop
		cancel()
	}()
	t := time.NewTicker(s.cfg.Interval)
	defer t.Stop()
	for {
		s.Round(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Round scrapes every target once, at most scrapesAtOnce at a time, and
// forgets the replicas no longer among them.
func (s *Scraper) Round(ctx context.Context) {
	targets := s.cfg.Targets()
	keep := make(map[key]bool, len(targets))
	var wg sync.WaitGroup
	slots := make(chan struct{}, scrapesAtOnce)
	for _, tg := range targets {
		keep[key{tg.Provider, tg.Replica}] = true
		wg.Go(func() {
			slots <- struct{}{}
			defer func() { <-slots }()
			rd, err := s.scrape(ctx, tg.URL)
			s.record(tg, rd, err)
		})
	}
	wg.Wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	for k := range s.state {
		if !keep[k] {
			delete(s.state, k)
		}
	}
}

// scrape reads one exposition.
func (s *Scraper) scrape(ctx context.Context, url string) (Reading, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return Reading{}, err
	}
	req.Header.Set("Accept", "text/plain;version=0.0.4")
	resp, err := s.cfg.Client.Do(req)
	if err != nil {
		return Reading{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		return Reading{}, fmt.Errorf("status %d", resp.StatusCode)
	}
	return Parse(resp.Body, s.cfg.MaxBytes)
}

// record keeps one scrape's result: a good reading replaces the load, a
// failure keeps the last one and, after StaleAfter in a row, marks it
// stale.
func (s *Scraper) record(tg Target, rd Reading, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := key{tg.Provider, tg.Replica}
	r := s.state[k]
	if r == nil {
		r = &replica{}
		s.state[k] = r
	}
	if err != nil {
		r.fails++
		r.errs++
		if r.fails == s.cfg.StaleAfter {
			s.cfg.Log.Warn("engine metrics unreadable; routing by in-flight counts", "provider", tg.Provider, "replica", tg.Replica, "url", tg.URL, "err", err)
		}
		r.lastErr = err.Error()
		r.load.Stale = r.load.Stale || r.fails >= s.cfg.StaleAfter || !r.good
		return
	}
	rate := rd.HitRate
	if r.good && rd.Hits >= 0 && rd.Queries > r.last.Queries && rd.Hits >= r.last.Hits {
		rate = (rd.Hits - r.last.Hits) / (rd.Queries - r.last.Queries)
	}
	r.load = route.EngineLoad{Running: rd.Running, Waiting: rd.Waiting, KVUsage: rd.KVUsage, PrefixHitRate: min(rate, 1), At: s.cfg.Now()}
	r.last, r.good, r.fails, r.lastErr = rd, true, 0, ""
	r.ok++
}

// Replica implements route.EngineSignals.
func (s *Scraper) Replica(provider string, i int) (route.EngineLoad, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	r := s.state[key{provider, i}]
	if r == nil {
		return route.EngineLoad{}, false
	}
	return s.replicaLocked(r), true
}

var (
	descRunning = prometheus.NewDesc("llmesh_engine_requests_running",
		"Requests a self-hosted replica's engine reports running, as last scraped.", []string{"provider", "replica"}, nil)
	descWaiting = prometheus.NewDesc("llmesh_engine_requests_waiting",
		"Requests a self-hosted replica's engine reports queued, as last scraped.", []string{"provider", "replica"}, nil)
	descKV = prometheus.NewDesc("llmesh_engine_kv_cache_usage_ratio",
		"The fraction of a self-hosted replica's KV cache in use, as last scraped.", []string{"provider", "replica"}, nil)
	descStale = prometheus.NewDesc("llmesh_engine_signals_stale",
		"1 when a replica's engine figures are stale (its scrapes fail) and routing uses in-flight counts.", []string{"provider", "replica"}, nil)
	descScrapes = prometheus.NewDesc("llmesh_engine_scrapes_total",
		"Scrapes of self-hosted replicas' metrics endpoints, by result (ok or error).", []string{"provider", "replica", "result"}, nil)
)

// Describe implements prometheus.Collector.
func (s *Scraper) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descRunning, descWaiting, descKV, descStale, descScrapes} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (s *Scraper) Collect(ch chan<- prometheus.Metric) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	for k, r := range s.state {
		rep := strconv.Itoa(k.replica)
		l := s.replicaLocked(r)
		stale := 0.0
		if l.Stale {
			stale = 1
		}
		ch <- prometheus.MustNewConstMetric(descRunning, prometheus.GaugeValue, float64(l.Running), k.provider, rep)
		ch <- prometheus.MustNewConstMetric(descWaiting, prometheus.GaugeValue, float64(l.Waiting), k.provider, rep)
		ch <- prometheus.MustNewConstMetric(descKV, prometheus.GaugeValue, l.KVUsage, k.provider, rep)
		ch <- prometheus.MustNewConstMetric(descStale, prometheus.GaugeValue, stale, k.provider, rep)
		ch <- prometheus.MustNewConstMetric(descScrapes, prometheus.CounterValue, float64(r.ok), k.provider, rep, "ok")
		ch <- prometheus.MustNewConstMetric(descScrapes, prometheus.CounterValue, float64(r.errs), k.provider, rep, "error")
	}
}

// replicaLocked is r's load as routing may use it: stale when its
// scrapes fail, or when its reading is older than three intervals (the
// scraper itself may be behind).
func (s *Scraper) replicaLocked(r *replica) route.EngineLoad {
	l := r.load
	if !r.good || s.cfg.Now().Sub(l.At) > 3*s.cfg.Interval {
		l.Stale = true
	}
	return l
}

// Summary is one provider's replicas with fresh figures, summed: what a
// node tells the mesh of the room a self-hosted provider has.
type Summary struct {
	Provider         string
	Replicas         int
	Running, Waiting int
	KVUsage          float64 // the fullest replica's
}

// Summaries sums each provider's fresh replicas, in provider order; a
// provider with none fresh is left out.
func (s *Scraper) Summaries() []Summary {
	s.mu.RLock()
	by := map[string]*Summary{}
	for k, r := range s.state {
		l := s.replicaLocked(r)
		if l.Stale {
			continue
		}
		sum := by[k.provider]
		if sum == nil {
			sum = &Summary{Provider: k.provider}
			by[k.provider] = sum
		}
		sum.Replicas++
		sum.Running += l.Running
		sum.Waiting += l.Waiting
		sum.KVUsage = max(sum.KVUsage, l.KVUsage)
	}
	s.mu.RUnlock()
	out := make([]Summary, 0, len(by))
	for _, sum := range by {
		out = append(out, *sum)
	}
	slices.SortFunc(out, func(a, b Summary) int { return strings.Compare(a.Provider, b.Provider) })
	return out
}
