// Package des is llmesh's discrete-event simulator: a mesh of regions,
// nodes, providers and tenants under a day's workload, in virtual time,
// planned by the project's own code — the route planner and its policies,
// the executor's admission step before every attempt (the residency
// guard, provider health and outlier ejection, the budget escrow, rate
// shares and the replica ring, settled by its ticket), session affinity,
// the rate limiter, and the budget ledger with each node's escrow holder
// — with provider calls, networks and gossip delay modelled: a
// provider's answer by a log-normal time to first token and a token
// rate, or, for a provider with an engine, by sim/engine's model of a
// vLLM replica (batch, queue, prefix cache) in virtual time, one per
// replica. It runs the same scenario and seed under several policies
// side by side and reports cost, latency, failovers, affinity, the
// engines' prefix hit rate, residency violations and budget overspend.
// Same scenario and seed, same output, byte for byte.
package des

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"slices"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/llmesh/llmesh/route"
)

// Scenario is what a simulation runs: see sim/scenarios for examples.
type Scenario struct {
	Name     string        `yaml:"name"`
	Seed     uint64        `yaml:"seed"`
	Duration time.Duration `yaml:"duration"` // virtual time simulated
	// Regions and their nodes (nodes: 0 means 1).
	Regions []RegionSpec `yaml:"regions"`
	// RTT between regions: Default for any pair not listed, Local inside
	// a region.
	RTT       RTTSpec        `yaml:"rtt"`
	Providers []ProviderSpec `yaml:"providers"`
	Tenants   []TenantSpec   `yaml:"tenants"`
	Workload  WorkloadSpec   `yaml:"workload"`
	// GossipDelay is how long other nodes take to learn what one node saw
	// of a provider (default 2s).
	GossipDelay time.Duration `yaml:"gossip_delay"`
	// Partitions cut regions off the mesh for a while: their nodes
	// neither forward nor are forwarded to, and gossip does not cross.
	Partitions []Window `yaml:"partitions"`
}

// RegionSpec is a region: its jurisdiction and how many nodes serve it.
type RegionSpec struct {
	Name         string `yaml:"name"`
	Jurisdiction string `yaml:"jurisdiction"`
	Nodes        int    `yaml:"nodes"`
}

// RTTSpec gives round-trip times between regions.
type RTTSpec struct {
	Default time.Duration `yaml:"default"`
	Local   time.Duration `yaml:"local"`
	Pairs   []RTTPair     `yaml:"pairs"`
}

// RTTPair is the round trip between two regions, both ways.
type RTTPair struct {
	A   string        `yaml:"a"`
	B   string        `yaml:"b"`
	RTT time.Duration `yaml:"rtt"`
}

// ProviderSpec is a provider: where it is, what it costs, how fast it is,
// its limits and its outages.
type ProviderSpec struct {
	Name          string      `yaml:"name"`
	Region        string      `yaml:"region"`
	Reach         string      `yaml:"reach"` // global (default) | region
	Jurisdictions []string    `yaml:"jurisdictions"`
	Priority      int         `yaml:"priority"`
	Models        []ModelSpec `yaml:"models"`
	// TTFT is the time to the first token: a log-normal with this median
	// and 99th percentile.
	TTFT Dist `yaml:"ttft"`
	// TokensPerSecond is the generation speed after the first token.
	TokensPerSecond float64 `yaml:"tokens_per_second"`
	// RPM and TPM are the provider's own limits (429 beyond them), which
	// the mesh also knows: the leader shares them out among the nodes.
	RPM int `yaml:"rpm"`
	TPM int `yaml:"tpm"`
	// Replicas is how many endpoints serve it (a GPU cluster's
	// replicas): sessions are placed on them by the bounded-load ring,
	// and a later turn on the same replica finds its prompt cached.
	Replicas int `yaml:"replicas"`
	// Outages are windows when every call fails.
	Outages []Window `yaml:"outages"`
	// Engine, when set, makes each replica an inference engine with a
	// batch, a queue and a prefix cache, whose speed replaces TTFT and
	// TokensPerSecond (see EngineSpec).
	Engine *EngineSpec `yaml:"engine"`
	// ErrorRate is the fraction of calls that fail at other times.
	ErrorRate float64 `yaml:"error_rate"`
}

// ModelSpec is a model a provider serves and its prices.
type ModelSpec struct {
	Name             string  `yaml:"name"`
	InputUSDPerMTok  float64 `yaml:"input_usd_per_mtok"`
	OutputUSDPerMTok float64 `yaml:"output_usd_per_mtok"`
}

// Dist is a log-normal distribution by its median and 99th percentile.
type Dist struct {
	Median time.Duration `yaml:"median"`
	P99    time.Duration `yaml:"p99"`
}

// Window is a stretch of virtual time, from the start of the run; Regions
// is what a partition cuts off.
type Window struct {
	Start   time.Duration `yaml:"start"`
	End     time.Duration `yaml:"end"`
	Regions []string      `yaml:"regions"`
}

// TenantSpec is a tenant: where its data may go, its budget, where its
// clients are and its share of the sessions.
type TenantSpec struct {
	Name      string `yaml:"name"`
	Residency string `yaml:"residency"` // a jurisdiction, or "" for anywhere
	// BudgetUSD over the whole run; 0: none.
	BudgetUSD float64 `yaml:"budget_usd"`
	// Regions its clients connect to (default: every region).
	Regions []string `yaml:"regions"`
	Weight  float64  `yaml:"weight"` // share of sessions (default 1)
	// MaxTTFT is its time-to-first-token objective (a node's
	// tenants[].max_ttft): a self-hosted provider whose every replica is
	// predicted past it goes after the other compliant providers.
	MaxTTFT time.Duration `yaml:"max_ttft"`
	id      uint64        // identifies its shared prefix to the engines' caches
}

// WorkloadSpec is the traffic: sessions arriving as a Poisson process
// whose rate follows a daily shape, each a few turns apart.
type WorkloadSpec struct {
	// SessionsPerHour is the mean arrival rate; DailyShape, when given,
	// scales it hour by hour (24 factors, averaging 1 is usual).
	SessionsPerHour float64   `yaml:"sessions_per_hour"`
	DailyShape      []float64 `yaml:"daily_shape"`
	// Phases, in place of DailyShape, scale it stretch by stretch from
	// the start of the run: a bench's steps of load (the last factor
	// holds past the last phase). Results are also reported by phase.
	Phases []PhaseSpec `yaml:"phases"`
	// Trace, when given, is when sessions arrive, from the start of the
	// run, in order, in place of the Poisson process (SessionsPerHour
	// and the shapes then only name the phases): a recorded or a
	// bench's workload replayed.
	Trace []time.Duration `yaml:"trace"`
	// Turns is the mean number of requests per session (geometric, at
	// least 1); ThinkTime the mean pause between them (exponential).
	Turns     float64       `yaml:"turns"`
	ThinkTime time.Duration `yaml:"think_time"`
	// PromptTokens and CompletionTokens are log-normal by median and
	// 99th percentile.
	PromptTokens     TokenDist `yaml:"prompt_tokens"`
	CompletionTokens TokenDist `yaml:"completion_tokens"`
	// Models requested, by weight.
	Models []WeightedModel `yaml:"models"`
	// Stream is the fraction of requests that stream.
	Stream float64 `yaml:"stream"`
	// SharedPrefixTokens is the system prompt every prompt of a tenant
	// starts with (within its prompt tokens): what an engine's prefix
	// cache shares between the tenant's sessions.
	SharedPrefixTokens int `yaml:"shared_prefix_tokens"`
}

// PhaseSpec is a stretch of the run at Factor times the mean rate.
type PhaseSpec struct {
	Duration time.Duration `yaml:"duration"`
	Factor   float64       `yaml:"factor"`
}

// TokenDist is a log-normal count of tokens.
type TokenDist struct {
	Median int `yaml:"median"`
	P99    int `yaml:"p99"`
}

// WeightedModel is a model and its share of requests.
type WeightedModel struct {
	Name   string  `yaml:"name"`
	Weight float64 `yaml:"weight"`
}

// LoadScenario reads a scenario file: unknown fields and bad values are
// errors naming the field.
func LoadScenario(path string) (*Scenario, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return ParseScenario(b)
}

// ParseScenario decodes and checks a scenario.
func ParseScenario(b []byte) (*Scenario, error) {
	var s Scenario
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&s); err != nil {
		return nil, fmt.Errorf("scenario: %w", err)
	}
	if err := s.Check(); err != nil {
		return nil, err
	}
	return &s, nil
}

// Check checks a scenario made in code, as ParseScenario checks one it
// reads, and fills in its defaults.
func (s *Scenario) Check() error {
	if s.Duration <= 0 {
		return bad("duration", "must be above 0")
	}
	if s.GossipDelay == 0 {
		s.GossipDelay = 2 * time.Second
	}
	if s.RTT.Default == 0 {
		s.RTT.Default = 100 * time.Millisecond
	}
	if s.RTT.Local == 0 {
		s.RTT.Local = time.Millisecond
	}
	regions, err := s.checkRegions()
	if err != nil {
		return err
	}
	models, err := s.checkProviders(regions)
	if err != nil {
		return err
	}
	if err := s.checkTenants(regions); err != nil {
		return err
	}
	if err := s.Workload.check(models); err != nil {
		return err
	}
	for i, p := range s.Partitions {
		if p.End <= p.Start || len(p.Regions) == 0 {
			return bad(fmt.Sprintf("partitions[%d]", i), "needs regions and must end after it starts")
		}
	}
	return nil
}

// bad is a scenario error naming the field.
func bad(field, format string, args ...any) error {
	return fmt.Errorf("scenario: %s: %s", field, fmt.Sprintf(format, args...))
}

// checkRegions checks the regions and the round trips between them, and
// returns the regions' names.
func (s *Scenario) checkRegions() (map[string]bool, error) {
	regions := map[string]bool{}
	if len(s.Regions) == 0 {
		return nil, bad("regions", "at least one is needed")
	}
	for i := range s.Regions {
		r := &s.Regions[i]
		if r.Name == "" || r.Jurisdiction == "" || regions[r.Name] {
			return nil, bad(fmt.Sprintf("regions[%d]", i), "needs a unique name and a jurisdiction")
		}
		regions[r.Name] = true
		r.Nodes = max(r.Nodes, 1)
	}
	for i, p := range s.RTT.Pairs {
		if !regions[p.A] || !regions[p.B] || p.RTT <= 0 {
			return nil, bad(fmt.Sprintf("rtt.pairs[%d]", i), "needs two known regions and an rtt above 0")
		}
	}
	return regions, nil
}

// checkProviders checks the providers and returns the models they serve.
func (s *Scenario) checkProviders(regions map[string]bool) (map[string]bool, error) {
	names := map[string]bool{}
	models := map[string]bool{}
	for i := range s.Providers {
		p := &s.Providers[i]
		f := fmt.Sprintf("providers[%d]", i)
		switch {
		case p.Name == "" || names[p.Name]:
			return nil, bad(f+".name", "must be given and unique")
		case !regions[p.Region]:
			return nil, bad(f+".region", "%q is not a region", p.Region)
		case p.Reach != "" && p.Reach != "global" && p.Reach != "region":
			return nil, bad(f+".reach", "must be global or region")
		case len(p.Models) == 0:
			return nil, bad(f+".models", "at least one is needed")
		case p.Engine == nil && (p.TTFT.Median <= 0 || p.TTFT.P99 < p.TTFT.Median):
			return nil, bad(f+".ttft", "needs a median above 0 and a p99 at least as large")
		case p.Engine == nil && p.TokensPerSecond <= 0:
			return nil, bad(f+".tokens_per_second", "must be above 0")
		case p.ErrorRate < 0 || p.ErrorRate > 1:
			return nil, bad(f+".error_rate", "must be in [0, 1]")
		case p.RPM < 0 || p.TPM < 0:
			return nil, bad(f+".rpm", "limits must not be negative")
		case p.Replicas < 0 || p.Replicas > route.MaxReplicas:
			return nil, bad(f+".replicas", "must be in [0, %d]", route.MaxReplicas)
		}
		if p.Engine != nil {
			if _, err := p.Engine.config(f + ".engine"); err != nil {
				return nil, err
			}
		}
		names[p.Name] = true
		for _, m := range p.Models {
			models[m.Name] = true
		}
		for j, w := range p.Outages {
			if w.End <= w.Start {
				return nil, bad(fmt.Sprintf("%s.outages[%d]", f, j), "must end after it starts")
			}
		}
	}
	return models, nil
}

// checkTenants checks the tenants and fills in their default weight.
func (s *Scenario) checkTenants(regions map[string]bool) error {
	if len(s.Tenants) == 0 {
		return bad("tenants", "at least one is needed")
	}
	for i := range s.Tenants {
		t := &s.Tenants[i]
		if t.Name == "" {
			return bad(fmt.Sprintf("tenants[%d].name", i), "is required")
		}
		if t.Weight == 0 {
			t.Weight = 1
		}
		t.id = 1<<62 | uint64(i)
		for _, r := range t.Regions {
			if !regions[r] {
				return bad(fmt.Sprintf("tenants[%d].regions", i), "%q is not a region", r)
			}
		}
		if t.BudgetUSD < 0 || t.Weight < 0 || t.MaxTTFT < 0 {
			return bad(fmt.Sprintf("tenants[%d]", i), "budget_usd, weight and max_ttft must not be negative")
		}
	}
	return nil
}

// check checks the workload, whose models must be served, and fills in
// its defaults.
func (w *WorkloadSpec) check(models map[string]bool) error {
	switch {
	case w.SessionsPerHour <= 0 && len(w.Trace) == 0:
		return bad("workload.sessions_per_hour", "must be above 0")
	case !slices.IsSorted(w.Trace) || len(w.Trace) > 0 && w.Trace[0] < 0:
		return bad("workload.trace", "must be offsets from the start, not negative, in order")
	case len(w.DailyShape) != 0 && len(w.DailyShape) != 24:
		return bad("workload.daily_shape", "needs 24 factors, one an hour")
	case len(w.Models) == 0:
		return bad("workload.models", "at least one is needed")
	case w.PromptTokens.Median <= 0 || w.PromptTokens.P99 < w.PromptTokens.Median:
		return bad("workload.prompt_tokens", "needs a median above 0 and a p99 at least as large")
	case w.CompletionTokens.Median <= 0 || w.CompletionTokens.P99 < w.CompletionTokens.Median:
		return bad("workload.completion_tokens", "needs a median above 0 and a p99 at least as large")
	case w.Stream < 0 || w.Stream > 1:
		return bad("workload.stream", "must be in [0, 1]")
	case w.SharedPrefixTokens < 0:
		return bad("workload.shared_prefix_tokens", "must not be negative")
	case len(w.Phases) > 0 && len(w.DailyShape) > 0:
		return bad("workload.phases", "replaces daily_shape: give one or the other")
	}
	for i, ph := range w.Phases {
		if ph.Duration <= 0 || ph.Factor < 0 {
			return bad(fmt.Sprintf("workload.phases[%d]", i), "needs a duration above 0 and a factor not negative")
		}
	}
	for i, m := range w.Models {
		if !models[m.Name] || m.Weight <= 0 {
			return bad(fmt.Sprintf("workload.models[%d]", i), "%q needs a provider serving it and a weight above 0", m.Name)
		}
	}
	w.Turns = math.Max(w.Turns, 1)
	if w.ThinkTime == 0 {
		w.ThinkTime = 20 * time.Second
	}
	return nil
}
