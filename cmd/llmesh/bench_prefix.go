package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/llmesh/llmesh/sim/bench"
	"github.com/llmesh/llmesh/sim/engine"
)

// oraclePolicy names the run that routes without a node: the load
// generator sends every tenant's conversations straight to one replica
// (tenant i to replica i mod n), so it knows where each prefix is
// cached because it put it there.
const oraclePolicy = "oracle"

// prefixPolicies are the runs of a shared-prefix bench, in order.
var prefixPolicies = []string{"round_robin", "least_loaded", "session", "prefix", oraclePolicy}

// workloadOf is the workload args ask for ("" when they name none):
// shared-prefix and spill have flags of their own.
func workloadOf(args []string) string {
	for i, a := range args {
		a = strings.TrimLeft(a, "-")
		if w, ok := strings.CutPrefix(a, "workload="); ok {
			return w
		}
		if a == "workload" && i+1 < len(args) {
			return args[i+1]
		}
	}
	return ""
}

// runBenchPrefix is `llmesh bench -workload shared-prefix`: for each
// replica policy in turn, fresh emulated engine replicas, a node with
// one vllm provider over them under that policy, and the same
// shared-prefix workload; then the oracle, straight to fresh replicas.
func runBenchPrefix(args []string, stdout, stderr io.Writer) int {
	cfg := bench.DefaultPrefixConfig()
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.String("workload", "shared-prefix", "the workload: shared-prefix")
	fs.Float64Var(&cfg.Rate, "rate", cfg.Rate, "requests per second offered (conversations start at rate/turns a second)")
	fs.DurationVar(&cfg.Duration, "duration", cfg.Duration, "how long conversations start, per policy")
	fs.DurationVar(&cfg.Drain, "drain", cfg.Drain, "how long the turns in flight may take after -duration before they are cancelled")
	fs.IntVar(&cfg.Tenants, "tenants", cfg.Tenants, "distinct system prefixes")
	fs.IntVar(&cfg.PrefixWords, "prefix-words", cfg.PrefixWords, "words (about tokens) of each tenant's system prefix")
	fs.IntVar(&cfg.Turns, "turns", cfg.Turns, "turns of each conversation")
	fs.IntVar(&cfg.UserWords, "user-words", cfg.UserWords, "words of each user message")
	fs.IntVar(&cfg.MaxTokens, "max-tokens", cfg.MaxTokens, "answer length in tokens")
	fs.Uint64Var(&cfg.Seed, "seed", cfg.Seed, "seed of the workload")
	replicas := fs.Int("replicas", 4, "emulated engine replicas")
	preset := fs.String("engine", "llama-3.1-8b-h100", "the replicas' engine preset ("+strings.Join(engine.PresetNames(), ", ")+")")
	kvBlocks := fs.Int("kv-blocks", 0, "each replica's KV cache in blocks (0: a quarter of the tenants' prefixes and a tenth more for the running requests, or room for four of the longest requests if that is more)")
	policies := fs.String("policies", strings.Join(prefixPolicies, ","), "the runs, in order: replica policies and "+oraclePolicy)
	asJSON := fs.Bool("json", false, "print JSON")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if err := cfg.Validate(); err != nil {
		fmt.Fprintf(stderr, "llmesh bench: %v\n", err)
		return 2
	}
	ec, ok := engine.Preset(*preset)
	if !ok {
		fmt.Fprintf(stderr, "llmesh bench: -engine: %q is not one of %s\n", *preset, strings.Join(engine.PresetNames(), ", "))
		return 2
	}
	if *kvBlocks == 0 {
		// The longest request, its chat template and tenant line allowed
		// for generously, so that a small test workload still fits.
		longest := 2 * (cfg.PrefixWords + 20 + cfg.Turns*(cfg.UserWords+cfg.MaxTokens+10))
		*kvBlocks = max(cfg.Tenants*cfg.PrefixWords*11/10/4, 4*longest) / ec.Block()
	}
	if *replicas < 2 {
		fmt.Fprintln(stderr, "llmesh bench: -replicas must be at least 2: the policies choose among replicas")
		return 2
	}
	runs := strings.Split(*policies, ",")
	for _, p := range runs {
		if !slices.Contains(prefixPolicies, p) {
			fmt.Fprintf(stderr, "llmesh bench: -policies: %q is not one of %s\n", p, strings.Join(prefixPolicies, ", "))
			return 2
		}
	}
	ctx, stop := untilSignal(stderr)
	defer stop()
	var rs []bench.PrefixResult
	for _, policy := range runs {
		r, err := benchPrefixPolicy(ctx, stderr, cfg, policy, *replicas, *preset, *kvBlocks)
		if err != nil {
			fmt.Fprintf(stderr, "llmesh bench: %s: %v\n", policy, err)
			return 1
		}
		rs = append(rs, r)
	}
	if *asJSON {
		b, _ := json.MarshalIndent(map[string]any{"config": cfg, "replicas": *replicas, "engine": *preset, "kv_blocks": *kvBlocks, "results": rs}, "", "  ")
		fmt.Fprintln(stdout, string(b))
		return 0
	}
	fmt.Fprintf(stdout, "shared prefix: %d tenants of %d-word prefixes, %d-turn conversations, %d-token answers, %g requests/s for %s per policy; %d replicas of %s with %d KV blocks each\n\n",
		cfg.Tenants, cfg.PrefixWords, cfg.Turns, cfg.MaxTokens, cfg.Rate, cfg.Duration, *replicas, *preset, *kvBlocks)
	bench.PrefixTable(stdout, rs, "round_robin", oraclePolicy)
	return 0
}

// benchPrefixPolicy runs the workload once under policy, on replicas
// started for it alone (their caches empty), and stops them.
func benchPrefixPolicy(ctx context.Context, stderr io.Writer, cfg bench.PrefixConfig, policy string, replicas int, preset string, kvBlocks int) (bench.PrefixResult, error) {
	self, err := os.Executable()
	if err != nil {
		return bench.PrefixResult{}, err
	}
	dir, err := os.MkdirTemp("", "llmesh-bench-*")
	if err != nil {
		return bench.PrefixResult{}, err
	}
	b := &benchTargets{dir: dir, key: "sk-llmesh-bench-0000000000000000"}
	defer b.stop()
	var urls []string
	for i := range replicas {
		emu := exec.Command(self, "emulate", "-listen", "127.0.0.1:0", "-name", fmt.Sprintf("replica-%d", i),
			"-engine", preset, "-kv-blocks", fmt.Sprint(kvBlocks))
		u, err := b.start(ctx, fmt.Sprintf("replica %d", i), regexp.MustCompile(`serving .* on (http://\S+)`), emu)
		if err != nil {
			return bench.PrefixResult{}, err
		}
		urls = append(urls, u)
	}
	t := bench.PrefixTarget{Name: policy}
	if policy == oraclePolicy {
		for _, u := range urls {
			t.Replicas = append(t.Replicas, u+"/v1")
		}
	} else {
		u, err := b.startPrefixNode(self, urls, policy, cfg.Model, stderr)
		if err != nil {
			return bench.PrefixResult{}, err
		}
		t.URL, cfg.Key = u, b.key
	}
	rs, err := bench.RunPrefix(ctx, cfg, []bench.PrefixTarget{t})
	if err != nil {
		return bench.PrefixResult{}, err
	}
	return rs[0], nil
}

// startPrefixNode starts a node with one vllm provider over the
// replicas at urls under policy, and returns its API root.
func (b *benchTargets) startPrefixNode(self string, urls []string, policy, model string, stderr io.Writer) (string, error) {
	sum := sha256.Sum256([]byte(b.key))
	var reps []string
	for _, u := range urls {
		reps = append(reps, fmt.Sprintf("%q", u))
	}
	config := fmt.Sprintf(`node: {name: bench, region: local, data_dir: %s, http: "127.0.0.1:0"}
regions: [{name: local, jurisdiction: xx}]
probes: {disabled: true}
tenants: [{name: bench, key_sha256: [%s]}]
providers:
  - {name: gpu, kind: vllm, region: local, replicas: [%s], replica_policy: %s, models: [{name: %s}]}
`, b.dir, hex.EncodeToString(sum[:]), strings.Join(reps, ", "), policy, model)
	return b.startAgent(self, config, stderr)
}

// startAgent starts `llmesh agent` with config (written to the run's
// directory) on a free loopback port, waits until it is ready and
// returns its API root.
func (b *benchTargets) startAgent(self, config string, stderr io.Writer) (string, error) {
	path := filepath.Join(b.dir, "node.yaml")
	if err := os.WriteFile(path, []byte(config), 0o600); err != nil {
		return "", err
	}
	addr, err := freeAddr()
	if err != nil {
		return "", err
	}
	node := exec.Command(self, "agent", "-config", path, "-http", addr, "-log-level", "warn")
	node.Stdout, node.Stderr = stderr, stderr
	if err := node.Start(); err != nil {
		return "", err
	}
	b.procs = append(b.procs, node)
	if err := awaitReady("http://"+addr, 20*time.Second); err != nil {
		return "", fmt.Errorf("node: %w", err)
	}
	return "http://" + addr + "/v1", nil
}
