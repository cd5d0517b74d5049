package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"time"

	"github.com/llmesh/llmesh/node"
	"github.com/llmesh/llmesh/sim/harness"
)

// overrideFlags applies the flags that override the configuration file.
func overrideFlags(cfg *node.Config, httpAddr, advertise, name string) {
	if name != "" {
		cfg.Node.Name = name
	}
	if httpAddr != "" {
		cfg.Node.HTTP = httpAddr
	}
	if advertise != "" {
		cfg.Node.Advertise = advertise
	}
}

// agentFlags are `llmesh agent`'s flags.
type agentFlags struct {
	dev                       bool
	configPath                string
	httpAddr, advertise, name string
	logFormat, logLevel       string
	logPrompts                bool
	shutdownTimeout           time.Duration
}

// parseAgentFlags parses args; it returns false, having said why, when
// they are not a valid command line.
func parseAgentFlags(args []string, stderr io.Writer) (agentFlags, bool) {
	var f agentFlags
	fs := flag.NewFlagSet("agent", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.BoolVar(&f.dev, "dev", false, "run one node with built-in emulated providers and a generated tenant key")
	fs.StringVar(&f.configPath, "config", "", "the node's configuration `file` (YAML)")
	fs.StringVar(&f.httpAddr, "http", "", "HTTP `address` for the API; overrides node.http")
	fs.StringVar(&f.advertise, "advertise", "", "`IP` peers should dial, or auto; overrides node.advertise (e.g. a pod's IP)")
	fs.StringVar(&f.name, "name", "", "the node's `name`, unique in the mesh; overrides node.name (e.g. a pod's name)")
	fs.StringVar(&f.logFormat, "log-format", "text", "log format: text or json")
	fs.StringVar(&f.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	fs.BoolVar(&f.logPrompts, "log-prompts", false, "debugging only: log each request's body (its prompt) with its request id; logs then hold your users' data")
	fs.DurationVar(&f.shutdownTimeout, "shutdown-timeout", 0, "bound on a graceful stop; overrides node.drain.timeout (default 30s)")
	if err := fs.Parse(args); err != nil {
		return f, false
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "llmesh agent: unexpected argument %q\n", fs.Arg(0))
		return f, false
	}
	if f.dev == (f.configPath != "") {
		fmt.Fprintln(stderr, "llmesh agent: give exactly one of -dev or -config FILE")
		return f, false
	}
	return f, true
}

func runAgent(args []string, stdout, stderr io.Writer) int {
	f, ok := parseAgentFlags(args, stderr)
	if !ok {
		return 2
	}
	logger, err := newLogger(stderr, f.logFormat, f.logLevel)
	if err != nil {
		fmt.Fprintf(stderr, "llmesh agent: %v\n", err)
		return 2
	}
	var cfg *node.Config
	var devStack *harness.Dev
	if f.dev {
		if devStack, err = startDevStack(f.httpAddr); err != nil {
			fmt.Fprintf(stderr, "llmesh agent -dev: %v\n", err)
			return 1
		}
		defer devStack.Shutdown(context.Background())
		cfg = devStack.Config
		// A single node's elections are expected: not shown unless asked.
		logger = slog.New(harness.QuietLogs(logger.Handler()))
	} else {
		if cfg, err = node.LoadConfig(f.configPath); err != nil {
			fmt.Fprintf(stderr, "llmesh agent: %v\n", err)
			return 1
		}
		overrideFlags(cfg, f.httpAddr, f.advertise, f.name)
	}
	opts := node.Options{Logger: logger, Version: version, LogPrompts: f.logPrompts}
	if devStack != nil {
		opts.LedgerTuning = harness.DevLedger
	}
	n, err := node.New(cfg, opts)
	if err != nil {
		fmt.Fprintf(stderr, "llmesh agent: invalid configuration:\n%v\n", err)
		return 1
	}
	ctx, stop := untilSignal(stderr)
	defer stop()
	reload := reloads() // before Start: a SIGHUP must never kill the agent
	if err := n.Start(ctx); err != nil {
		fmt.Fprintf(stderr, "llmesh agent: %v\n", err)
		return 1
	}
	if devStack != nil {
		// The banner's curl should work the moment it is printed.
		for deadline := time.Now().Add(15 * time.Second); !n.Ready() && time.Now().Before(deadline); {
			select {
			case <-ctx.Done():
			case <-time.After(20 * time.Millisecond):
			}
		}
		printDevBanner(stdout, n.HTTPAddr(), devStack.Key, keepDevKey(f.httpAddr, n.HTTPAddr(), devStack.Key, stderr))
	}
	serveUntilStopped(ctx, n, reload, f, logger)
	timeout := n.DrainTimeout()
	if f.shutdownTimeout > 0 {
		timeout = f.shutdownTimeout
	}
	sctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := n.Shutdown(sctx); err != nil {
		fmt.Fprintf(stderr, "llmesh agent: %v\n", err)
		return 1
	}
	return 0
}

// serveUntilStopped returns when the agent is told to stop (SIGINT or
// SIGTERM) or the node has drained (through the admin API); on SIGHUP it
// reloads the configuration file, and a file it cannot apply leaves the
// node with the one it has.
func serveUntilStopped(ctx context.Context, n *node.Node, reload <-chan os.Signal, f agentFlags, logger *slog.Logger) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-n.Done():
			return
		case <-reload:
		}
		if f.configPath == "" {
			logger.Warn("SIGHUP: nothing to reload: agent -dev has no configuration file")
			continue
		}
		next, err := node.LoadConfig(f.configPath)
		if err == nil {
			overrideFlags(next, f.httpAddr, f.advertise, f.name)
			err = n.Reload(next)
		}
		if err != nil {
			logger.Error("SIGHUP: configuration not reloaded; the node keeps the one it has", "err", err)
		}
	}
}

// startDevStack starts `agent -dev`'s stack listening on httpAddr (the
// default when empty). On a port given, the dev tenant's key is the one
// kept in that port's key file (harness.DevKeyFile), made there the
// first time, so that a restart keeps it; on port 0 the key is new, and
// keepDevKey writes it once the port is known.
func startDevStack(httpAddr string) (*harness.Dev, error) {
	if httpAddr == "" {
		httpAddr = node.DefaultHTTPAddr
	}
	if _, port, err := net.SplitHostPort(httpAddr); err != nil || port == "0" {
		return harness.StartDev(httpAddr)
	}
	key, err := harness.DevKey(harness.DevKeyFile(httpAddr))
	if err != nil {
		return nil, err
	}
	return harness.StartDevKey(httpAddr, key)
}

// keepDevKey returns the key file of the dev node serving on addr (asked
// for on asked), writing key there when the node took a port of the
// system's choosing; "" when it could not be written.
func keepDevKey(asked, addr, key string, stderr io.Writer) string {
	path := harness.DevKeyFile(addr)
	if _, port, err := net.SplitHostPort(asked); err != nil || port != "0" {
		return path
	}
	if err := harness.WriteDevKey(path, key); err != nil {
		fmt.Fprintf(stderr, "llmesh agent -dev: %v\n", err)
		return ""
	}
	return path
}

// printDevBanner says what a dev node serving on addr offers: its API,
// its dashboard, the tenant key (and the file keeping it, when there is
// one) and commands to try, each as it runs when pasted.
func printDevBanner(w io.Writer, addr, key, keyFile string) {
	fmt.Fprintf(w, "\nllmesh dev agent ready on http://%s\n", addr)
	fmt.Fprintf(w, "  API:        http://%s/v1\n  dashboard:  http://%s/ui/\n", addr, addr)
	bearer := key
	if keyFile != "" {
		fmt.Fprintf(w, "  dev tenant key: %s\n  key file:   %s (kept: the same key after a restart on this port)\n", key, keyFile)
		bearer = "$(cat " + keyFile + ")"
	} else {
		fmt.Fprintf(w, "  dev tenant key: %s\n", key)
	}
	fmt.Fprintf(w, "  providers: openai-us (us), azure-eu (eu), gpu-eu (eu, this region only), together-us (us)\n")
	fmt.Fprintf(w, "  models: gpt-4o-mini, gpt-4o, llama-3-8b\n\ntry:\n")
	fmt.Fprintf(w, "  curl -s http://%s/v1/chat/completions -H \"Authorization: Bearer %s\" \\\n", addr, bearer)
	fmt.Fprintf(w, "    -H 'Content-Type: application/json' -d '{\"model\":\"gpt-4o-mini\",\"messages\":[{\"role\":\"user\",\"content\":\"Hello\"}]}'\n")
	flag := ""
	if addr != node.DefaultHTTPAddr {
		flag = " -addr http://" + addr
	}
	for _, verb := range []string{"status", "providers", "members", "budgets"} {
		fmt.Fprintf(w, "  llmesh %s%s\n", verb, flag)
	}
	fmt.Fprintln(w)
}

func newLogger(w io.Writer, format, level string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("-log-level: %q is not debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("-log-format: %q is not text or json", format)
}
