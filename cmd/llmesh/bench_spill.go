package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/llmesh/llmesh/route"
	"github.com/llmesh/llmesh/sim/bench"
	"github.com/llmesh/llmesh/sim/des"
	"github.com/llmesh/llmesh/sim/engine"
)

// spillMesh is what the spill bench's node and its simulation are given
// alike: an eu region whose node calls local GPU replicas (the cheapest
// compliant provider) and an eu cloud (compliant, dearer), a us cloud
// cheaper than both that the eu tenant may never use, and the tenant's
// max_ttft.
type spillMesh struct {
	Replicas  int           `json:"replicas"`
	Preset    string        `json:"engine"`
	KVBlocks  int           `json:"kv_blocks"`
	MaxTTFT   time.Duration `json:"max_ttft_ns"`
	CloudTTFT time.Duration `json:"cloud_ttft_ns"`
	CloudTPS  float64       `json:"cloud_tps"`
	// PromptTokens is the mean prompt the workload's requests are, as
	// the engines count it.
	PromptTokens int `json:"prompt_tokens"`
}

// The spill bench's providers, cheapest first.
var spillProviders = []struct {
	name, region string
	in, out      float64
}{
	{"cloud-us", "us-east", 0.01, 0.02},
	{"gpu", "eu-west", 0.05, 0.10},
	{"cloud-eu", "eu-west", 2.50, 10.00},
}

// runBenchSpill is `llmesh bench -workload spill`: emulated engine
// replicas and two clouds as processes, a node over them, and the spill
// workload's steps of load sent through it; then the same mesh and
// workload in the simulator, and the two splits side by side.
func runBenchSpill(args []string, stdout, stderr io.Writer) int {
	cfg := bench.DefaultSpillConfig()
	m := spillMesh{Replicas: 2, Preset: "llama-3.1-8b-h100", MaxTTFT: time.Second, CloudTTFT: 400 * time.Millisecond, CloudTPS: 200}
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.String("workload", "spill", "the workload: spill")
	phases := fs.String("phases", "20s@4,40s@16,30s@4", "steps of load, `DURATION@RATE,...` (requests a second)")
	fs.IntVar(&cfg.PromptWords, "prompt-words", cfg.PromptWords, "words (about tokens) of each prompt")
	fs.IntVar(&cfg.MaxTokens, "max-tokens", cfg.MaxTokens, "answer length in tokens")
	fs.DurationVar(&cfg.Drain, "drain", cfg.Drain, "how long the requests in flight may take after the last phase")
	fs.Uint64Var(&cfg.Seed, "seed", cfg.Seed, "seed of the workload, and of the simulation")
	fs.IntVar(&m.Replicas, "replicas", m.Replicas, "emulated engine replicas of the local GPU provider")
	fs.StringVar(&m.Preset, "engine", m.Preset, "the replicas' engine preset ("+strings.Join(engine.PresetNames(), ", ")+")")
	fs.IntVar(&m.KVBlocks, "kv-blocks", 0, "each replica's KV cache in blocks (0: room for four requests at once)")
	fs.DurationVar(&m.MaxTTFT, "max-ttft", m.MaxTTFT, "the tenant's max_ttft")
	fs.DurationVar(&m.CloudTTFT, "cloud-ttft", m.CloudTTFT, "the clouds' time to first token")
	fs.Float64Var(&m.CloudTPS, "cloud-tps", m.CloudTPS, "the clouds' tokens per second")
	asJSON := fs.Bool("json", false, "print JSON")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	var err error
	if cfg.Phases, err = bench.ParseSpillPhases(*phases); err == nil {
		err = cfg.Validate()
	}
	ec, ok := engine.Preset(m.Preset)
	switch {
	case err != nil:
		fmt.Fprintf(stderr, "llmesh bench: %v\n", err)
		return 2
	case !ok:
		fmt.Fprintf(stderr, "llmesh bench: -engine: %q is not one of %s\n", m.Preset, strings.Join(engine.PresetNames(), ", "))
		return 2
	case m.Replicas < 1 || m.MaxTTFT <= 0 || m.CloudTTFT <= 0 || m.CloudTPS <= 0:
		fmt.Fprintln(stderr, "llmesh bench: -replicas, -max-ttft, -cloud-ttft and -cloud-tps must be above 0")
		return 2
	}
	if m.PromptTokens, err = spillPromptTokens(cfg); err != nil {
		fmt.Fprintf(stderr, "llmesh bench: %v\n", err)
		return 1
	}
	if m.KVBlocks == 0 {
		m.KVBlocks = 4 * ((m.PromptTokens + cfg.MaxTokens + ec.Block() - 1) / ec.Block())
	}
	ctx, stop := untilSignal(stderr)
	defer stop()
	live, err := benchSpillLive(ctx, stderr, cfg, m)
	if err != nil {
		fmt.Fprintf(stderr, "llmesh bench: %v\n", err)
		return 1
	}
	sim, err := simulateSpill(cfg, m)
	if err != nil {
		fmt.Fprintf(stderr, "llmesh bench: the simulation: %v\n", err)
		return 1
	}
	if *asJSON {
		b, _ := json.MarshalIndent(map[string]any{"config": cfg, "mesh": m, "live": live, "simulated": sim,
			"gap": spillGap(live, sim), "gap_all": spillGapAll(live, sim)}, "", "  ")
		fmt.Fprintln(stdout, string(b))
		return 0
	}
	fmt.Fprintf(stdout, "spill-over: an eu tenant with max_ttft %s, %d-word prompts (%d tokens), %d-token answers; %d replicas of %s with %d KV blocks each, then eu and us clouds\n\n",
		m.MaxTTFT, cfg.PromptWords, m.PromptTokens, cfg.MaxTokens, m.Replicas, m.Preset, m.KVBlocks)
	spillTable(stdout, live, sim)
	return 0
}

// spillPromptTokens is the mean prompt of the workload's requests, in
// tokens as a node and the emulator count them.
func spillPromptTokens(cfg bench.SpillConfig) (int, error) {
	reqs := bench.SpillWorkload(cfg)
	if len(reqs) == 0 {
		return 0, fmt.Errorf("the phases send no request")
	}
	var tok route.Tokenizer
	total := 0
	n := min(len(reqs), 50)
	for _, r := range reqs[:n] {
		body, _ := json.Marshal(map[string]any{"model": cfg.Model, "messages": []map[string]string{{"role": "user", "content": r.Prompt}}})
		chat, err := route.ParseChatRequest(body)
		if err != nil {
			return 0, err
		}
		total += tok.CountPrompt(chat)
	}
	return total / n, nil
}

// benchSpillLive starts the replicas, the clouds and the node, and sends
// the workload through the node.
func benchSpillLive(ctx context.Context, stderr io.Writer, cfg bench.SpillConfig, m spillMesh) (bench.SpillResult, error) {
	self, err := os.Executable()
	if err != nil {
		return bench.SpillResult{}, err
	}
	dir, err := os.MkdirTemp("", "llmesh-bench-*")
	if err != nil {
		return bench.SpillResult{}, err
	}
	b := &benchTargets{dir: dir, key: "sk-llmesh-bench-0000000000000000"}
	defer b.stop()
	serving := regexp.MustCompile(`serving .* on (http://\S+)`)
	urls := map[string][]string{}
	for i := range m.Replicas {
		u, err := b.start(ctx, fmt.Sprintf("replica %d", i), serving, exec.Command(self, "emulate", "-listen", "127.0.0.1:0",
			"-name", fmt.Sprintf("gpu-%d", i), "-engine", m.Preset, "-kv-blocks", fmt.Sprint(m.KVBlocks)))
		if err != nil {
			return bench.SpillResult{}, err
		}
		urls["gpu"] = append(urls["gpu"], u+"/v1")
	}
	for _, name := range []string{"cloud-eu", "cloud-us"} {
		u, err := b.start(ctx, name, serving, exec.Command(self, "emulate", "-listen", "127.0.0.1:0", "-name", name,
			"-ttft", m.CloudTTFT.String(), "-tps", fmt.Sprint(m.CloudTPS)))
		if err != nil {
			return bench.SpillResult{}, err
		}
		urls[name] = []string{u + "/v1"}
	}
	api, err := b.startSpillNode(self, urls, cfg.Model, m.MaxTTFT, stderr)
	if err != nil {
		return bench.SpillResult{}, err
	}
	cfg.Key = b.key
	return bench.RunSpill(ctx, cfg, api)
}

// startSpillNode starts the eu node over the providers at urls and
// returns its API root.
func (b *benchTargets) startSpillNode(self string, urls map[string][]string, model string, maxTTFT time.Duration, stderr io.Writer) (string, error) {
	sum := sha256.Sum256([]byte(b.key))
	var ps strings.Builder
	for _, p := range spillProviders {
		kind, where := "openai", fmt.Sprintf("base_url: %q", urls[p.name][0])
		if p.name == "gpu" {
			var reps []string
			for _, u := range urls[p.name] {
				reps = append(reps, fmt.Sprintf("%q", u))
			}
			kind, where = "vllm", "reach: region, replicas: ["+strings.Join(reps, ", ")+"]"
		}
		fmt.Fprintf(&ps, "  - {name: %s, kind: %s, region: %s, %s, models: [{name: %s, input_usd_per_mtok: %g, output_usd_per_mtok: %g}]}\n",
			p.name, kind, p.region, where, model, p.in, p.out)
	}
	config := fmt.Sprintf(`node: {name: bench-eu, region: eu-west, data_dir: %s, http: "127.0.0.1:0"}
regions: [{name: eu-west, jurisdiction: eu}, {name: us-east, jurisdiction: us}]
probes: {disabled: true}
tenants: [{name: acme, residency: eu, max_ttft: %s, key_sha256: [%s]}]
providers:
%s`, b.dir, maxTTFT, hex.EncodeToString(sum[:]), ps.String())
	return b.startAgent(self, config, stderr)
}

// spillScenario is the live bench as a simulator scenario: the same
// providers, prices, engines and tenant, and the workload's requests,
// at the offsets the bench sends them, as single streamed requests of
// the mean prompt.
func spillScenario(cfg bench.SpillConfig, m spillMesh) *des.Scenario {
	s := &des.Scenario{Name: "spill-over bench", Seed: cfg.Seed,
		Regions: []des.RegionSpec{{Name: "eu-west", Jurisdiction: "eu", Nodes: 1}, {Name: "us-east", Jurisdiction: "us", Nodes: 1}},
		RTT:     des.RTTSpec{Default: 100 * time.Millisecond, Local: time.Millisecond}, GossipDelay: 2 * time.Second,
		Tenants: []des.TenantSpec{{Name: "acme", Residency: "eu", Regions: []string{"eu-west"}, Weight: 1, MaxTTFT: m.MaxTTFT}},
		Workload: des.WorkloadSpec{SessionsPerHour: 3600, Turns: 1, Stream: 1,
			PromptTokens:     des.TokenDist{Median: m.PromptTokens, P99: m.PromptTokens},
			CompletionTokens: des.TokenDist{Median: cfg.MaxTokens, P99: cfg.MaxTokens},
			Models:           []des.WeightedModel{{Name: cfg.Model, Weight: 1}}},
	}
	for _, ph := range cfg.Phases {
		s.Duration += ph.Duration
		s.Workload.Phases = append(s.Workload.Phases, des.PhaseSpec{Duration: ph.Duration, Factor: ph.Rate})
	}
	for _, r := range bench.SpillWorkload(cfg) {
		s.Workload.Trace = append(s.Workload.Trace, r.At)
	}
	for _, p := range spillProviders {
		ps := des.ProviderSpec{Name: p.name, Region: p.region, Models: []des.ModelSpec{{Name: cfg.Model, InputUSDPerMTok: p.in, OutputUSDPerMTok: p.out}},
			TTFT: des.Dist{Median: m.CloudTTFT, P99: m.CloudTTFT}, TokensPerSecond: m.CloudTPS}
		if p.name == "gpu" {
			ps.Reach, ps.Replicas = "region", m.Replicas
			ps.Engine = &des.EngineSpec{Preset: m.Preset, KVBlocks: m.KVBlocks}
		}
		s.Providers = append(s.Providers, ps)
	}
	return s
}

// simulateSpill runs the spill scenario, the bench's own arrivals
// replayed, under llmesh's policy.
func simulateSpill(cfg bench.SpillConfig, m spillMesh) (*des.Result, error) {
	s := spillScenario(cfg, m)
	if err := s.Check(); err != nil {
		return nil, err
	}
	return des.RunPolicy(s, "llmesh")
}

// spillShare is the fraction of a phase's answered requests provider
// served.
func spillShare(servedBy map[string]int, provider string) float64 {
	total := 0
	for _, n := range servedBy {
		total += n
	}
	if total == 0 {
		return 0
	}
	return float64(servedBy[provider]) / float64(total)
}

// spillGapAll is how far the simulated split of the whole run is from
// the live one: the difference between the local GPUs' shares of the
// requests (the clouds' is the same, the us cloud serving none).
func spillGapAll(live bench.SpillResult, sim *des.Result) float64 {
	return math.Abs(spillShare(live.ServedBy, "gpu") - spillShare(sim.ServedBy, "gpu"))
}

// spillGap is spillGapAll's largest over the phases and the whole run.
func spillGap(live bench.SpillResult, sim *des.Result) float64 {
	gap := spillGapAll(live, sim)
	for i, ph := range live.Phases {
		if i < len(sim.Phases) {
			gap = math.Max(gap, math.Abs(spillShare(ph.ServedBy, "gpu")-spillShare(sim.Phases[i].ServedBy, "gpu")))
		}
	}
	return gap
}

// spillTable prints each phase's split, live and simulated.
func spillTable(w io.Writer, live bench.SpillResult, sim *des.Result) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "phase\trate/s\trequests live/sim\tgpu live\tgpu sim\tcloud-eu live\tcloud-eu sim\tcloud-us live/sim\terrors\tgpu TTFT p90 live\tcloud-eu TTFT p90 live\t")
	row := func(name string, rate string, req, simReq int, lb, sb map[string]int, errs int, gpu90, cloud90 string) {
		fmt.Fprintf(tw, "%s\t%s\t%d / %d\t%.1f%%\t%.1f%%\t%.1f%%\t%.1f%%\t%d / %d\t%d\t%s\t%s\t\n", name, rate, req, simReq,
			100*spillShare(lb, "gpu"), 100*spillShare(sb, "gpu"), 100*spillShare(lb, "cloud-eu"), 100*spillShare(sb, "cloud-eu"),
			lb["cloud-us"], sb["cloud-us"], errs, gpu90, cloud90)
	}
	for i, ph := range live.Phases {
		var sp des.PhaseResult
		if i < len(sim.Phases) {
			sp = sim.Phases[i]
		}
		row(fmt.Sprintf("%d (%s)", i+1, ph.Duration), fmt.Sprint(ph.Rate), ph.Requests, sp.Requests, ph.ServedBy, sp.ServedBy,
			ph.Errors+ph.Unfinished, msOrDash(ph.TTFT90["gpu"]), msOrDash(ph.TTFT90["cloud-eu"]))
	}
	row("all", "", live.Requests, sim.Requests, live.ServedBy, sim.ServedBy, live.Errors+live.Unfinished, "", "")
	tw.Flush()
	fmt.Fprintf(w, "\nlive and simulated gpu shares apart by %.1f points over the run, %.1f at most in a phase; residency violations simulated: %d\n",
		100*spillGapAll(live, sim), 100*spillGap(live, sim), sim.ResidencyViolations)
	if live.FirstError != "" {
		fmt.Fprintf(w, "first error: %s\n", live.FirstError)
	}
}

func msOrDash(d time.Duration) string {
	if d == 0 {
		return "-"
	}
	return fmt.Sprintf("%dms", d.Milliseconds())
}
