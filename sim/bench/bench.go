// Package bench is llmesh's load generator: open-loop load at a fixed
// request rate (each request leaves at its scheduled time whatever the
// others do, and its latency counts from that time, so queueing shows),
// or closed-loop load for maximum throughput, against several targets in
// interleaved slices so that machine noise hits each alike. It measures
// latency percentiles, time to first byte of streams, errors, truncated
// streams, and the CPU time each target's process spent per request.
package bench

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Target is one endpoint under load: an OpenAI-compatible base URL (up
// to /v1), and the process that serves it, for CPU accounting (0: none).
type Target struct {
	Name string
	URL  string
	PID  int
	// Model and Key, when set, replace the run's for this target: another
	// gateway may name the model otherwise, and take its own key.
	Model, Key string
}

// Endpoints are the APIs a run can load, by the name -endpoint takes.
var Endpoints = []string{"chat", "embeddings", "responses"}

// Config is one run's load.
type Config struct {
	// Rate is the open-loop request rate per second; Closed, when above
	// zero, replaces it with that many closed-loop workers.
	Rate   int
	Closed int
	// Duration is how long each target is under load in all; Slice how
	// long each turn lasts (targets take turns, Duration/Slice each).
	Duration, Slice time.Duration
	// Stream is the fraction of requests that stream.
	Stream float64
	// MaxTokens is each answer's length; Model and Key what requests say.
	MaxTokens  int
	Model, Key string
	// Endpoint is the API loaded: chat (the default), embeddings (never
	// streamed) or responses.
	Endpoint string `json:",omitempty"`
	// Prompt is the user message; empty means a short one.
	Prompt string
	// Timeout bounds one request.
	Timeout time.Duration
	// Hold keeps that many streams of HoldTokens tokens open to a target
	// throughout its turns, besides the load: what holding many slow
	// streams costs (with the emulator's tokens per second set low). They
	// are not among the samples.
	Hold, HoldTokens int
}

// DefaultConfig is 1,000 requests/s, non-streaming, 10 s per target in
// one-second turns, answers of 16 tokens.
func DefaultConfig() Config {
	return Config{Rate: 1000, Duration: 10 * time.Second, Slice: time.Second, MaxTokens: 16, Model: "gpt-4o-mini",
		Prompt: "Say hello.", Timeout: 30 * time.Second}
}

// Result is what one target's load measured.
type Result struct {
	Target    string        `json:"target"`
	Sent      int           `json:"sent"`
	OK        int           `json:"ok"`
	Errors    int           `json:"errors"`
	Truncated int           `json:"truncated"` // streams without [DONE]
	RPS       float64       `json:"rps"`       // answered per second under load
	P50       time.Duration `json:"p50_ns"`
	P90       time.Duration `json:"p90_ns"`
	P99       time.Duration `json:"p99_ns"`
	P999      time.Duration `json:"p999_ns"`
	// TTFB is the time to a stream's first byte of body, p50 and p99.
	TTFB50 time.Duration `json:"ttfb_p50_ns,omitempty"`
	TTFB99 time.Duration `json:"ttfb_p99_ns,omitempty"`
	// CPUPerReq is the target process's CPU time (user + system) per
	// request sent to it; 0 when unknown.
	CPUPerReq time.Duration `json:"cpu_per_request_ns,omitempty"`
	// RSSIdle is the target process's resident memory before any load,
	// RSSPeak the most sampled (every 100 ms) during its turns; bytes, 0
	// when unknown.
	RSSIdle int64 `json:"rss_idle_bytes,omitempty"`
	RSSPeak int64 `json:"rss_peak_bytes,omitempty"`
	// FirstError is one error, to tell what went wrong.
	FirstError string `json:"first_error,omitempty"`
}

// sample is one request's outcome.
type sample struct {
	latency, ttfb time.Duration
	stream        bool
	err           string
	truncated     bool
}

// Run loads every target in turns and returns one result per target.
func Run(ctx context.Context, cfg Config, targets []Target) ([]Result, error) {
	if cfg.Slice <= 0 || cfg.Slice > cfg.Duration {
		cfg.Slice = cfg.Duration
	}
	if cfg.Rate <= 0 && cfg.Closed <= 0 {
		return nil, fmt.Errorf("bench: a rate or closed-loop workers are needed")
	}
	tr := &http.Transport{MaxIdleConns: 4096, MaxIdleConnsPerHost: 4096, IdleConnTimeout: time.Minute, DisableCompression: true}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: cfg.Timeout}
	out := make([]Result, len(targets))
	for i, t := range targets {
		out[i].RSSIdle = rss(t.PID)
	}
	// Warm each target up: connections, caches, the tokenizer. A target
	// that does not answer ends the run now, not after a timeout per
	// request of the load; one that fails now and then (the bare proxy
	// cuts an answer off once in a few thousand) is measured, its
	// errors counted.
	for _, t := range targets {
		failed, last := 0, ""
		for i := range 20 {
			wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			s := one(wctx, client, cfg, t, i%2 == 0 && cfg.Stream > 0)
			cancel()
			if s.err != "" {
				failed, last = failed+1, s.err
			}
		}
		if failed > 2 {
			return nil, fmt.Errorf("bench: %s does not answer (%d of 20 failed): %s", t.Name, failed, last)
		}
	}
	samples := make([][]sample, len(targets))
	cpu := make([]time.Duration, len(targets))
	elapsed := make([]time.Duration, len(targets))
	for turn := time.Duration(0); turn < cfg.Duration; turn += cfg.Slice {
		for i, t := range targets {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			stopHold := hold(ctx, client, cfg, t)
			stopRSS := sampleRSS(t.PID, &out[i].RSSPeak)
			c0 := cpuTime(t.PID)
			start := time.Now()
			var got []sample
			if cfg.Closed > 0 {
				got = closedLoop(ctx, client, cfg, t)
			} else {
				got = openLoop(ctx, client, cfg, t)
			}
			elapsed[i] += time.Since(start)
			cpu[i] += cpuTime(t.PID) - c0
			stopRSS()
			stopHold()
			samples[i] = append(samples[i], got...)
		}
	}
	for i, t := range targets {
		idle, peak := out[i].RSSIdle, out[i].RSSPeak
		out[i] = summarize(t.Name, samples[i], elapsed[i])
		out[i].RSSIdle, out[i].RSSPeak = idle, peak
		if t.PID > 0 && out[i].Sent > 0 {
			out[i].CPUPerReq = cpu[i] / time.Duration(out[i].Sent)
		}
	}
	return out, nil
}

// hold opens cfg.Hold long chat streams to t, each followed by another when it
// ends, and returns once each has its first byte (or failed), so that the
// load that follows meets them all open. They stay open until the
// returned function is called, which waits until they are closed again.
// Without Hold it does nothing.
func hold(ctx context.Context, client *http.Client, cfg Config, t Target) (stop func()) {
	if cfg.Hold <= 0 {
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	body := fmt.Sprintf(`{"model":%q,"max_tokens":%d,"stream":true,"messages":[{"role":"user","content":%q}]}`,
		cmp.Or(t.Model, cfg.Model), max(cfg.HoldTokens, 1), cfg.Prompt)
	var wg, open sync.WaitGroup
	open.Add(cfg.Hold)
	for range cfg.Hold {
		wg.Go(func() {
			first := sync.OnceFunc(open.Done)
			defer first()
			for ctx.Err() == nil {
				holdOne(ctx, client, cmp.Or(t.Key, cfg.Key), t.URL, body, first)
			}
		})
	}
	open.Wait()
	return func() {
		cancel()
		wg.Wait()
	}
}

// holdOne sends one streaming request and reads it to its end, calling
// opened at its first byte or failure.
func holdOne(ctx context.Context, client *http.Client, key, url, body string, opened func()) {
	defer opened()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/chat/completions", strings.NewReader(body))
	if err != nil {
		return
	}
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	// The overall client timeout would cut a held stream short.
	resp, err := (&http.Client{Transport: client.Transport}).Do(req)
	if err == nil && resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		err = errors.New(resp.Status)
	}
	if err != nil {
		// Not in a tight loop: a target that refuses is not hammered.
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
		return
	}
	defer resp.Body.Close()
	var b [512]byte
	for {
		_, err := resp.Body.Read(b[:])
		opened()
		if err != nil {
			return
		}
	}
}

// sampleRSS raises *peak to pid's resident memory every 100 ms until the
// returned function is called, and once more then.
func sampleRSS(pid int, peak *int64) (stop func()) {
	if pid <= 0 {
		return func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			*peak = max(*peak, rss(pid))
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	})
	return func() {
		close(done)
		wg.Wait()
		*peak = max(*peak, rss(pid))
	}
}

// rss is a process's resident memory in bytes from /proc; 0 when it
// cannot be read.
func rss(pid int) int64 {
	if pid <= 0 {
		return 0
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(v) // "123456 kB"
			if len(f) == 2 && f[1] == "kB" {
				n, _ := strconv.ParseInt(f[0], 10, 64)
				return n << 10
			}
		}
	}
	return 0
}

// openLoop sends cfg.Rate requests a second for one slice, each at its
// scheduled time, and waits for their answers.
func openLoop(ctx context.Context, client *http.Client, cfg Config, t Target) []sample {
	n := int(float64(cfg.Rate) * cfg.Slice.Seconds())
	interval := time.Second / time.Duration(cfg.Rate)
	out := make([]sample, n)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range n {
		at := start.Add(time.Duration(i) * interval)
		if d := time.Until(at); d > 0 {
			time.Sleep(d)
		}
		stream := cfg.Stream > 0 && float64(i%100) < cfg.Stream*100
		wg.Go(func() {
			s := one(ctx, client, cfg, t, stream)
			s.latency = time.Since(at) // from the schedule: queueing counts
			out[i] = s
		})
	}
	wg.Wait()
	return out
}

// closedLoop runs cfg.Closed workers back to back for one slice.
func closedLoop(ctx context.Context, client *http.Client, cfg Config, t Target) []sample {
	var mu sync.Mutex
	var out []sample
	deadline := time.Now().Add(cfg.Slice)
	var wg sync.WaitGroup
	for w := range cfg.Closed {
		wg.Go(func() {
			var mine []sample
			for i := w; time.Now().Before(deadline); i += cfg.Closed {
				stream := cfg.Stream > 0 && float64(i%100) < cfg.Stream*100
				mine = append(mine, one(ctx, client, cfg, t, stream))
			}
			mu.Lock()
			out = append(out, mine...)
			mu.Unlock()
		})
	}
	wg.Wait()
	return out
}

// request is the body and path of one request of cfg's endpoint to t.
func request(cfg Config, t Target, stream bool) (path, body string) {
	model := cfg.Model
	if t.Model != "" {
		model = t.Model
	}
	switch cfg.Endpoint {
	case "embeddings":
		return "/embeddings", fmt.Sprintf(`{"model":%q,"input":%q}`, model, cfg.Prompt)
	case "responses":
		return "/responses", fmt.Sprintf(`{"model":%q,"max_output_tokens":%d,"stream":%v,"input":%q}`,
			model, max(cfg.MaxTokens, 16), stream, cfg.Prompt) // OpenAI's least max_output_tokens is 16
	}
	return "/chat/completions", fmt.Sprintf(`{"model":%q,"max_tokens":%d,"stream":%v,"messages":[{"role":"user","content":%q}]}`,
		model, cfg.MaxTokens, stream, cfg.Prompt)
}

// ended reports whether line ends a stream of cfg's endpoint: chat's
// [DONE], a Responses stream's terminal event.
func ended(cfg Config, line []byte) bool {
	if cfg.Endpoint == "responses" {
		return bytes.HasPrefix(line, []byte("event: response.completed")) ||
			bytes.HasPrefix(line, []byte("event: response.incomplete"))
	}
	return bytes.HasPrefix(line, []byte("data: [DONE]"))
}

// one sends one request and reads its answer whole.
func one(ctx context.Context, client *http.Client, cfg Config, t Target, stream bool) sample {
	stream = stream && cfg.Endpoint != "embeddings"
	path, body := request(cfg, t, stream)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, t.URL+path, strings.NewReader(body))
	if err != nil {
		return sample{err: err.Error()}
	}
	req.Header.Set("Content-Type", "application/json")
	if key := cmp.Or(t.Key, cfg.Key); key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	start := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		return sample{err: err.Error(), stream: stream}
	}
	defer resp.Body.Close()
	s := sample{stream: stream}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		s.latency = time.Since(start)
		s.err = fmt.Sprintf("%d: %s", resp.StatusCode, bytes.TrimSpace(b))
		return s
	}
	if !stream {
		if _, err := io.Copy(io.Discard, resp.Body); err != nil {
			s.err = err.Error()
		}
		s.latency = time.Since(start)
		return s
	}
	br := bufio.NewReader(resp.Body)
	done := false
	for first := true; ; first = false {
		line, err := br.ReadSlice('\n')
		if first {
			s.ttfb = time.Since(start)
		}
		if ended(cfg, line) {
			done = true
		}
		if err != nil {
			break // io.EOF, or the stream broke: without [DONE] it is truncated
		}
	}
	s.truncated = !done
	s.latency = time.Since(start)
	return s
}

func summarize(name string, ss []sample, elapsed time.Duration) Result {
	r := Result{Target: name, Sent: len(ss)}
	var lat, ttfb []time.Duration
	for _, s := range ss {
		switch {
		case s.err != "":
			r.Errors++
			if r.FirstError == "" {
				r.FirstError = s.err
			}
		case s.truncated:
			r.Truncated++
		default:
			r.OK++
			lat = append(lat, s.latency)
			if s.stream {
				ttfb = append(ttfb, s.ttfb)
			}
		}
	}
	if elapsed > 0 {
		r.RPS = float64(r.OK) / elapsed.Seconds()
	}
	r.P50, r.P90, r.P99, r.P999 = pct(lat, 0.5), pct(lat, 0.9), pct(lat, 0.99), pct(lat, 0.999)
	r.TTFB50, r.TTFB99 = pct(ttfb, 0.5), pct(ttfb, 0.99)
	return r
}

// pct returns the q-quantile of ds (nearest rank), sorting ds.
func pct(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	i := int(q*float64(len(ds))+0.5) - 1
	return ds[min(max(i, 0), len(ds)-1)]
}

// cpuTime is a process's CPU time (user + system) from /proc; 0 when it
// cannot be read.
func cpuTime(pid int) time.Duration {
	if pid <= 0 {
		return 0
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	// Fields after the command name, which is in parentheses and may
	// hold spaces: utime and stime are the 14th and 15th fields.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	const hz = 100 // USER_HZ on Linux
	return time.Duration(ut+st) * time.Second / hz
}
