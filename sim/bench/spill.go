package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// SpillConfig is the spill-over workload: single requests, each with a
// prompt of its own (nothing for a prefix cache to share), arriving open
// loop as a Poisson process whose rate steps through Phases, so that a
// node's local GPU replicas first have room, then are saturated, then
// drain. Every request streams; which provider answered is read from
// X-LLMesh-Provider.
type SpillConfig struct {
	// Phases are the steps of load, in order.
	Phases []SpillPhase
	// PromptWords is each prompt's length in words (about as many
	// tokens); MaxTokens each answer's.
	PromptWords, MaxTokens int
	// Drain is how long, after the last phase, the requests in flight
	// may still take before they are cancelled and counted unfinished.
	Drain time.Duration
	// Model is the model asked for; Key the tenant key sent.
	Model, Key string
	// Seed draws the arrivals and the prompts: every run of one seed
	// sends the same requests at the same offsets.
	Seed uint64
}

// SpillPhase is Duration of arrivals at Rate requests a second.
type SpillPhase struct {
	Duration time.Duration `json:"duration_ns"`
	Rate     float64       `json:"rate"`
}

// DefaultSpillConfig is issue 22's spill-over check: 20 s with room,
// 40 s at twice what two replicas of the default bench serve, 30 s to
// drain and come back.
func DefaultSpillConfig() SpillConfig {
	return SpillConfig{
		Phases:      []SpillPhase{{20 * time.Second, 4}, {40 * time.Second, 16}, {30 * time.Second, 4}},
		PromptWords: 1000, MaxTokens: 128, Drain: 30 * time.Second, Model: "llama-3.1-8b", Seed: 1,
	}
}

// ParseSpillPhases reads phases written as "DURATION@RATE,...", e.g.
// "20s@4,40s@16,30s@4".
func ParseSpillPhases(s string) ([]SpillPhase, error) {
	var out []SpillPhase
	for _, f := range strings.Split(s, ",") {
		d, r, ok := strings.Cut(strings.TrimSpace(f), "@")
		dur, err1 := time.ParseDuration(d)
		rate, err2 := strconv.ParseFloat(r, 64)
		if !ok || err1 != nil || err2 != nil || dur <= 0 || rate < 0 {
			return nil, fmt.Errorf("bench: phase %q is not DURATION@RATE (e.g. 20s@4)", f)
		}
		out = append(out, SpillPhase{dur, rate})
	}
	return out, nil
}

// Validate reports the first field out of range.
func (c SpillConfig) Validate() error {
	switch {
	case len(c.Phases) == 0:
		return fmt.Errorf("bench: at least one phase is needed")
	case c.PromptWords < 1 || c.MaxTokens < 1:
		return fmt.Errorf("bench: PromptWords and MaxTokens must be at least 1, got %d and %d", c.PromptWords, c.MaxTokens)
	case c.Drain < 0:
		return fmt.Errorf("bench: Drain must not be negative, got %s", c.Drain)
	}
	for i, p := range c.Phases {
		if p.Duration <= 0 || p.Rate < 0 {
			return fmt.Errorf("bench: phase %d needs a duration above 0 and a rate not negative", i)
		}
	}
	return nil
}

// SpillRequest is one request of the workload: when it leaves, from the
// start of the run, and its prompt.
type SpillRequest struct {
	At     time.Duration
	Phase  int
	Prompt string
}

// SpillWorkload is the requests of cfg, the same for every run of its
// seed.
func SpillWorkload(cfg SpillConfig) []SpillRequest {
	r := rand.New(rand.NewPCG(cfg.Seed, 0x5b111))
	var out []SpillRequest
	var start time.Duration
	for i, p := range cfg.Phases {
		end := start + p.Duration
		for at := start; p.Rate > 0; {
			at += time.Duration(r.ExpFloat64() / p.Rate * float64(time.Second))
			if at >= end {
				break
			}
			var b strings.Builder
			fmt.Fprintf(&b, "Request %d. Summarise:", len(out))
			for range cfg.PromptWords {
				b.WriteByte(' ')
				b.WriteString(vocabulary[r.IntN(len(vocabulary))])
			}
			out = append(out, SpillRequest{At: at, Phase: i, Prompt: b.String()})
		}
		start = end
	}
	return out
}

// SpillResult is what the node did with each phase's requests.
type SpillResult struct {
	Phases []SpillPhaseResult `json:"phases"`
	// ServedBy counts the answered requests of the whole run by the
	// provider that answered them.
	ServedBy   map[string]int `json:"served_by"`
	Requests   int            `json:"requests"`
	OK         int            `json:"ok"`
	Errors     int            `json:"errors"`
	Unfinished int            `json:"unfinished"`
	FirstError string         `json:"first_error,omitempty"`
}

// SpillPhaseResult is one phase's requests: those that left in it.
type SpillPhaseResult struct {
	SpillPhase
	Requests   int            `json:"requests"`
	OK         int            `json:"ok"`
	Errors     int            `json:"errors"`
	Unfinished int            `json:"unfinished"`
	ServedBy   map[string]int `json:"served_by"`
	// TTFT is from a request's scheduled departure to its first token,
	// by the provider that answered.
	TTFT50 map[string]time.Duration `json:"ttft_p50_ns"`
	TTFT90 map[string]time.Duration `json:"ttft_p90_ns"`
}

// RunSpill sends the workload to a node's API root url (up to /v1).
func RunSpill(ctx context.Context, cfg SpillConfig, url string) (SpillResult, error) {
	if err := cfg.Validate(); err != nil {
		return SpillResult{}, err
	}
	reqs := SpillWorkload(cfg)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1024}}
	defer client.CloseIdleConnections()
	var total time.Duration
	for _, p := range cfg.Phases {
		total += p.Duration
	}
	start := time.Now()
	ctx, cancel := context.WithDeadline(ctx, start.Add(total+cfg.Drain))
	defer cancel()
	pc := PrefixConfig{Model: cfg.Model, MaxTokens: cfg.MaxTokens, Key: cfg.Key}
	samples := make([]prefixSample, len(reqs))
	var wg sync.WaitGroup
	for i, rq := range reqs {
		at := start.Add(rq.At)
		if d := time.Until(at); d > 0 {
			select {
			case <-ctx.Done():
			case <-time.After(d):
			}
		}
		if ctx.Err() != nil {
			samples[i].unfinished = true
			continue
		}
		wg.Go(func() {
			s, _ := prefixOne(ctx, client, pc, url, []chatMessage{{Role: "user", Content: rq.Prompt}})
			if !s.first.IsZero() {
				s.ttft = s.first.Sub(at)
			}
			samples[i] = s.prefixSample
		})
	}
	wg.Wait()
	return summarizeSpill(cfg, reqs, samples), ctx.Err()
}

func summarizeSpill(cfg SpillConfig, reqs []SpillRequest, ss []prefixSample) SpillResult {
	r := SpillResult{ServedBy: map[string]int{}}
	ttfts := make([]map[string][]time.Duration, len(cfg.Phases))
	for i, p := range cfg.Phases {
		r.Phases = append(r.Phases, SpillPhaseResult{SpillPhase: p, ServedBy: map[string]int{},
			TTFT50: map[string]time.Duration{}, TTFT90: map[string]time.Duration{}})
		ttfts[i] = map[string][]time.Duration{}
	}
	for i, s := range ss {
		ph := &r.Phases[reqs[i].Phase]
		r.Requests++
		ph.Requests++
		switch {
		case s.unfinished:
			r.Unfinished++
			ph.Unfinished++
		case s.err != "":
			r.Errors++
			ph.Errors++
			if r.FirstError == "" {
				r.FirstError = s.err
			}
		default:
			r.OK++
			ph.OK++
			r.ServedBy[s.provider]++
			ph.ServedBy[s.provider]++
			ttfts[reqs[i].Phase][s.provider] = append(ttfts[reqs[i].Phase][s.provider], s.ttft)
		}
	}
	for i := range r.Phases {
		for p, ds := range ttfts[i] {
			slices.Sort(ds)
			r.Phases[i].TTFT50[p], r.Phases[i].TTFT90[p] = pct(ds, 0.5), pct(ds, 0.9)
		}
	}
	return r
}
