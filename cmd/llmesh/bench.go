package main

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/llmesh/llmesh/sim/bench"
)

// runBench is `llmesh bench`: the same open-loop load sent, in
// interleaved turns, straight to an emulated provider, through a bare
// httputil.ReverseProxy, through nginx (when installed) and through an
// llmesh node, each a process of its own; or, with -target, to one node
// already running.
func runBench(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "proxy" {
		return runBenchProxy(args[1:], stderr)
	}
	switch workloadOf(args) {
	case "shared-prefix":
		return runBenchPrefix(args, stdout, stderr)
	case "spill":
		return runBenchSpill(args, stdout, stderr)
	}
	cfg := bench.DefaultConfig()
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&cfg.Rate, "rate", cfg.Rate, "open-loop requests per second")
	fs.IntVar(&cfg.Closed, "closed", 0, "closed-loop `workers` instead of a rate (maximum throughput)")
	fs.DurationVar(&cfg.Duration, "duration", cfg.Duration, "load per target, in all")
	fs.DurationVar(&cfg.Slice, "slice", cfg.Slice, "length of each target's turn")
	fs.Float64Var(&cfg.Stream, "stream", 0, "fraction of requests that stream")
	fs.IntVar(&cfg.MaxTokens, "max-tokens", cfg.MaxTokens, "answer length in tokens")
	promptTokens := fs.Int("prompt-words", 2, "words in each prompt")
	target := fs.String("target", "", "load only this node (`URL` up to /v1), with -key")
	key := fs.String("key", "", "tenant key for -target")
	tps := fs.Float64("tps", 0, "emulator tokens per second (0: as fast as it can)")
	memLimit := fs.String("gomemlimit", "", "GOMEMLIMIT for the bare proxy and the node (e.g. 120MiB): Go's soft memory limit, as a container would set it")
	fs.IntVar(&cfg.Hold, "hold", 0, "keep this many long `streams` open to each target during its turns, besides the load (with a low -tps)")
	fs.IntVar(&cfg.HoldTokens, "hold-tokens", 1000, "answer length in tokens of each held stream")
	asJSON := fs.Bool("json", false, "print JSON")
	endpoints := fs.String("endpoint", "chat", "the `APIs` loaded, one run each in turn: chat, embeddings, responses, or several comma-separated")
	var peers []string
	fs.Func("peer", "another gateway's `URL` (up to /v1) to load beside the others, pointed at the bench's emulator (-emulator); repeatable; its key, if it takes one, from $LLMESH_BENCH_PEER_KEY", func(v string) error {
		u, err := url.Parse(v)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("%q is not an http(s) URL", v)
		}
		peers = append(peers, strings.TrimSuffix(v, "/"))
		return nil
	})
	peerModel := fs.String("peer-model", "", "the model's `name` at the peers (default: the bench's own); per API as chat=NAME,embeddings=NAME")
	emuListen := fs.String("emulator", "127.0.0.1:0", "`address` the bench's emulator listens on: a fixed one to point a -peer at")
	workload := fs.String("workload", "echo", "echo: short prompts, what a node adds; shared-prefix: tenants' long system prefixes over engine replicas, per replica policy (its own flags: -workload shared-prefix -h); spill: local GPU replicas saturated and drained under max_ttft, live and simulated (-workload spill -h)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	runs, err := benchEndpoints(*endpoints)
	if err != nil {
		fmt.Fprintf(stderr, "llmesh bench: -endpoint: %v\n", err)
		return 2
	}
	models, err := peerModels(*peerModel)
	if err != nil {
		fmt.Fprintf(stderr, "llmesh bench: -peer-model: %v\n", err)
		return 2
	}
	if *workload != "echo" {
		fmt.Fprintf(stderr, "llmesh bench: -workload: %q is not echo, shared-prefix or spill\n", *workload)
		return 2
	}
	if cfg.Hold > 0 && *tps == 0 && *target == "" {
		fmt.Fprintln(stderr, "llmesh bench: -hold needs -tps above 0, or held streams end at once")
		return 2
	}
	cfg.Prompt = strings.TrimSpace(strings.Repeat("hello ", max(*promptTokens, 1)))
	ctx, stop := untilSignal(stderr)
	defer stop()
	var targets []bench.Target
	if *target != "" {
		cfg.Key = *key
		targets = []bench.Target{{Name: "node", URL: strings.TrimSuffix(*target, "/")}}
	} else {
		st, err := startBenchTargets(ctx, stderr, *emuListen, *tps, *memLimit)
		if err != nil {
			fmt.Fprintf(stderr, "llmesh bench: %v\n", err)
			return 1
		}
		defer st.stop()
		targets, cfg.Key = st.targets, st.key
	}
	for i, u := range peers {
		targets = append(targets, bench.Target{Name: peerName(peers, i), URL: u, Key: os.Getenv("LLMESH_BENCH_PEER_KEY")})
	}
	return runEndpoints(ctx, cfg, targets, runs, models, *asJSON, stdout, stderr)
}

// benchRun is one endpoint's run, as -json prints it.
type benchRun struct {
	Endpoint string         `json:"endpoint"`
	Config   bench.Config   `json:"config"`
	Results  []bench.Result `json:"results"`
	Added    []bench.Added  `json:"added_over_direct"`
}

// runEndpoints loads targets with cfg for each of the APIs in runs in
// turn (the peers asking for models' names for each), and prints every
// run's table, or all of them as JSON.
func runEndpoints(ctx context.Context, cfg bench.Config, targets []bench.Target, runs []string, models map[string]string,
	asJSON bool, stdout, stderr io.Writer) int {
	var done []benchRun
	for i, api := range runs {
		c := cfg
		c.Endpoint = api
		if api == "embeddings" && c.Model == bench.DefaultConfig().Model {
			c.Model = benchEmbeddingModel
		}
		ts := slices.Clone(targets)
		for j := range ts {
			if strings.HasPrefix(ts[j].Name, "peer") {
				ts[j].Model = models[api]
			}
		}
		rs, err := bench.Run(ctx, c, ts)
		if err != nil {
			fmt.Fprintf(stderr, "llmesh bench: %s: %v\n", api, err)
			return 1
		}
		done = append(done, benchRun{api, c, rs, bench.AddedOver(rs, "direct")})
		if asJSON {
			continue
		}
		if i > 0 {
			fmt.Fprintln(stdout)
		}
		mode := fmt.Sprintf("open loop, %d requests/s", c.Rate)
		if c.Closed > 0 {
			mode = fmt.Sprintf("closed loop, %d workers", c.Closed)
		}
		answers := fmt.Sprintf("%.0f%% streams, %d-token answers", c.Stream*100, c.MaxTokens)
		if api == "embeddings" {
			answers = "embeddings"
		}
		fmt.Fprintf(stdout, "%s: %s, %s, %s per target in %s turns\n\n", api, mode, answers, c.Duration, c.Slice)
		bench.Table(stdout, rs, "direct")
	}
	if asJSON {
		var doc any = map[string]any{"runs": done}
		if len(done) == 1 { // the shape before -endpoint took a list
			doc = done[0]
		}
		b, _ := json.MarshalIndent(doc, "", "  ")
		fmt.Fprintln(stdout, string(b))
	}
	return 0
}

// benchEmbeddingModel is the model embeddings runs ask for.
const benchEmbeddingModel = "text-embedding-3-small"

// benchEndpoints reads -endpoint's list.
func benchEndpoints(v string) ([]string, error) {
	var out []string
	for api := range strings.SplitSeq(v, ",") {
		api = strings.TrimSpace(api)
		if !slices.Contains(bench.Endpoints, api) {
			return nil, fmt.Errorf("%q is not one of %s", api, strings.Join(bench.Endpoints, ", "))
		}
		if !slices.Contains(out, api) {
			out = append(out, api)
		}
	}
	return out, nil
}

// peerModels reads -peer-model: one name for every API, or api=NAME
// pairs; an API left out asks the peers for the bench's own model.
func peerModels(v string) (map[string]string, error) {
	out := map[string]string{}
	if v == "" {
		return out, nil
	}
	if !strings.Contains(v, "=") {
		for _, api := range bench.Endpoints {
			out[api] = v
		}
		return out, nil
	}
	for pair := range strings.SplitSeq(v, ",") {
		api, name, ok := strings.Cut(strings.TrimSpace(pair), "=")
		if !ok || name == "" || !slices.Contains(bench.Endpoints, api) {
			return nil, fmt.Errorf("%q is not API=NAME with API one of %s", pair, strings.Join(bench.Endpoints, ", "))
		}
		out[api] = name
	}
	return out, nil
}

// peerName names the i-th -peer in the tables: "peer" alone, else
// "peer-1", "peer-2"...
func peerName(peers []string, i int) string {
	if len(peers) == 1 {
		return "peer"
	}
	return fmt.Sprintf("peer-%d", i+1)
}

// benchTargets are the processes a bench run starts.
type benchTargets struct {
	targets []bench.Target
	key     string
	procs   []*exec.Cmd
	dir     string
}

func (b *benchTargets) stop() {
	for _, p := range b.procs {
		_ = p.Process.Signal(os.Interrupt)
	}
	for _, p := range b.procs {
		done := make(chan struct{})
		go func() { _ = p.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = p.Process.Kill()
		}
	}
	if b.dir != "" {
		_ = os.RemoveAll(b.dir)
	}
}

// startBenchTargets starts the emulator, the bare proxy, nginx if it is
// installed, and a node, each in its own process.
func startBenchTargets(ctx context.Context, stderr io.Writer, emuListen string, tps float64, memLimit string) (_ *benchTargets, err error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "llmesh-bench-*")
	if err != nil {
		return nil, err
	}
	b := &benchTargets{dir: dir, key: "sk-llmesh-bench-0000000000000000"}
	defer func() {
		if err != nil {
			b.stop()
		}
	}()
	emu := exec.Command(self, "emulate", "-listen", emuListen, "-tps", fmt.Sprint(tps))
	emuURL, err := b.start(ctx, "emulator", regexp.MustCompile(`serving .* on (http://\S+)`), emu)
	if err != nil {
		return nil, err
	}
	b.targets = append(b.targets, bench.Target{Name: "direct", URL: emuURL + "/v1", PID: emu.Process.Pid})

	proxy := exec.Command(self, "bench", "proxy", "-listen", "127.0.0.1:0", "-upstream", emuURL)
	if memLimit != "" {
		proxy.Env = append(os.Environ(), "GOMEMLIMIT="+memLimit)
	}
	proxyAddr, err := b.start(ctx, "proxy", regexp.MustCompile(`proxy listening on (\S+)`), proxy)
	if err != nil {
		return nil, err
	}
	b.targets = append(b.targets, bench.Target{Name: "go-proxy", URL: "http://" + proxyAddr + "/v1", PID: proxy.Process.Pid})

	if nginx, err := exec.LookPath("nginx"); err == nil {
		addr, pid, err := startNginx(nginx, dir, emuURL)
		if err != nil {
			fmt.Fprintf(stderr, "llmesh bench: nginx left out: %v\n", err)
		} else {
			b.procs = append(b.procs, pid)
			b.targets = append(b.targets, bench.Target{Name: "nginx", URL: "http://" + addr + "/v1", PID: nginxWorker(pid.Process.Pid)})
		}
	} else {
		fmt.Fprintln(stderr, "llmesh bench: nginx is not installed (apt-get install nginx-light): its column is left out")
	}

	if err := b.startNode(self, emuURL, proxy.Env, stderr); err != nil {
		return nil, err
	}
	return b, nil
}

// start starts cmd and returns the address it prints a line matching re
// with, once it does.
func (b *benchTargets) start(ctx context.Context, name string, re *regexp.Regexp, cmd *exec.Cmd) (string, error) {
	out, err := cmd.StderrPipe()
	if err != nil {
		return "", err
	}
	cmd.Stdout = cmd.Stderr
	if err := cmd.Start(); err != nil {
		return "", fmt.Errorf("%s: %w", name, err)
	}
	b.procs = append(b.procs, cmd)
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		sent := false
		for sc.Scan() {
			if m := re.FindStringSubmatch(sc.Text()); m != nil && !sent {
				found <- m[1]
				sent = true
			}
		}
		if !sent {
			close(found)
		}
	}()
	select {
	case addr, ok := <-found:
		if !ok {
			return "", fmt.Errorf("%s exited before it served", name)
		}
		return addr, nil
	case <-time.After(20 * time.Second):
		return "", fmt.Errorf("%s did not start within 20s", name)
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

// startNode starts a node in front of the emulator at emuURL, with env
// (GOMEMLIMIT) as the proxy's.
func (b *benchTargets) startNode(self, emuURL string, env []string, stderr io.Writer) error {
	sum := sha256.Sum256([]byte(b.key))
	config := fmt.Sprintf(`node: {name: bench, region: local, data_dir: %s, http: "127.0.0.1:0"}
regions: [{name: local, jurisdiction: xx}]
probes: {disabled: true}
limits: {max_concurrent_per_tenant: 1000000}
tenants: [{name: bench, key_sha256: [%s]}]
providers:
  - name: emulator
    region: local
    base_url: %q
    models:
      - {name: gpt-4o-mini, input_usd_per_mtok: 0.15, output_usd_per_mtok: 0.6}
      - {name: %s, api: embeddings, input_usd_per_mtok: 0.02}
`, b.dir, hex.EncodeToString(sum[:]), emuURL, benchEmbeddingModel)
	path := filepath.Join(b.dir, "node.yaml")
	if err := os.WriteFile(path, []byte(config), 0o600); err != nil {
		return err
	}
	// The node logs at warn: a line per request is not what is measured.
	// Its tenant may hold any number of requests in flight (the default,
	// 256, would refuse -hold's streams): the bench measures the path, not
	// a limit.
	// Its address is chosen here, and it is up once /readyz answers.
	nodeAddr, err := freeAddr()
	if err != nil {
		return err
	}
	node := exec.Command(self, "agent", "-config", path, "-http", nodeAddr, "-log-level", "warn")
	node.Stdout, node.Stderr = stderr, stderr
	node.Env = env
	if err := node.Start(); err != nil {
		return err
	}
	b.procs = append(b.procs, node)
	if err := awaitReady("http://"+nodeAddr, 20*time.Second); err != nil {
		return fmt.Errorf("node: %w", err)
	}
	b.targets = append(b.targets, bench.Target{Name: "llmesh", URL: "http://" + nodeAddr + "/v1", PID: node.Process.Pid})
	return nil
}

// freeAddr returns a loopback address with a free port.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// awaitReady polls base/readyz until it answers 200.
func awaitReady(base string, within time.Duration) error {
	c := &http.Client{Timeout: time.Second}
	for deadline := time.Now().Add(within); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if resp, err := c.Get(base + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
	}
	return fmt.Errorf("not ready within %s", within)
}

// startNginx runs nginx as a plain reverse proxy to upstream, one worker,
// keep-alive to the upstream, no buffering (streams pass as they come).
func startNginx(nginx, dir, upstream string) (string, *exec.Cmd, error) {
	u, err := url.Parse(upstream)
	if err != nil {
		return "", nil, err
	}
	addr, err := freeAddr()
	if err != nil {
		return "", nil, err
	}
	conf := fmt.Sprintf(`worker_processes 1;
daemon off;
pid %[1]s/nginx.pid;
error_log %[1]s/nginx-error.log warn;
events { worker_connections 8192; }
http {
  access_log off;
  client_body_temp_path %[1]s; proxy_temp_path %[1]s; fastcgi_temp_path %[1]s; uwsgi_temp_path %[1]s; scgi_temp_path %[1]s;
  upstream emulator { server %[2]s; keepalive 512; }
  server {
    listen %[3]s;
    location / {
      proxy_pass http://emulator;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
      proxy_request_buffering off;
    }
  }
}
`, dir, u.Host, addr)
	path := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
		return "", nil, err
	}
	cmd := exec.Command(nginx, "-p", dir, "-c", path)
	if err := cmd.Start(); err != nil {
		return "", nil, err
	}
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return addr, cmd, nil
		}
	}
	_ = cmd.Process.Kill()
	return "", nil, errors.New("nginx did not listen within 10s")
}

// nginxWorker finds the worker process of an nginx master (one worker),
// whose CPU time is what proxying costs.
func nginxWorker(master int) int {
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		s := string(b)
		if i := strings.LastIndexByte(s, ')'); i > 0 {
			f := strings.Fields(s[i+1:])
			if len(f) > 1 && f[1] == fmt.Sprint(master) {
				var pid int
				fmt.Sscan(e.Name(), &pid)
				return pid
			}
		}
	}
	return 0
}

// runBenchProxy is the bare Go reverse proxy the node is measured
// against: httputil.ReverseProxy with its defaults, flushing at once so
// that streams pass as they come.
func runBenchProxy(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("bench proxy", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", "127.0.0.1:0", "`address` to listen on")
	upstream := fs.String("upstream", "", "upstream `URL`")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	u, err := url.Parse(*upstream)
	if err != nil || u.Host == "" {
		fmt.Fprintln(stderr, "llmesh bench proxy: -upstream must be a URL")
		return 2
	}
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.FlushInterval = -1
	rp.Transport = &http.Transport{MaxIdleConns: 4096, MaxIdleConnsPerHost: 4096, IdleConnTimeout: time.Minute}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		fmt.Fprintf(stderr, "llmesh bench proxy: %v\n", err)
		return 1
	}
	fmt.Fprintf(stderr, "proxy listening on %s\n", ln.Addr())
	srv := &http.Server{Handler: rp, ReadHeaderTimeout: 10 * time.Second}
	ctx, stop := untilSignal(stderr)
	defer stop()
	go func() { <-ctx.Done(); _ = srv.Close() }()
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		fmt.Fprintf(stderr, "llmesh bench proxy: %v\n", err)
		return 1
	}
	return 0
}
