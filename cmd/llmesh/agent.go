package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/llmesh/llmesh/node"
	"github.com/llmesh/llmesh/sim/harness"
)

// devKeyFile is where `agent -dev` also writes its tenant key, so that the
// README's curl works as printed.
func devKeyFile() string { return filepath.Join(os.TempDir(), "llmesh-dev.key") }

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
		addr := f.httpAddr
		if addr == "" {
			addr = node.DefaultHTTPAddr
		}
		devStack, err = harness.StartDev(addr)
		if err != nil {
			fmt.Fprintf(stderr, "llmesh agent -dev: %v\n", err)
			return 1
		}
		defer devStack.Shutdown(context.Background())
		cfg = devStack.Config
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
		printDevBanner(stdout, n.HTTPAddr(), devStack.Key)
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

func printDevBanner(w io.Writer, addr, key string) {
	keyFile := devKeyFile()
	if err := os.WriteFile(keyFile, []byte(key+"\n"), 0o600); err != nil {
		keyFile = ""
	}
	fmt.Fprintf(w, "\nllmesh dev agent ready on http://%s\n", addr)
	fmt.Fprintf(w, "  dev tenant key: %s\n", key)
	if keyFile != "" {
		fmt.Fprintf(w, "  (also written to %s)\n", keyFile)
	}
	fmt.Fprintf(w, "  providers: openai-us (us), azure-eu (eu), gpu-eu (eu, this region only), together-us (us)\n")
	fmt.Fprintf(w, "  models: gpt-4o-mini, gpt-4o, llama-3-8b\n\ntry:\n")
	fmt.Fprintf(w, "  curl -s http://%s/v1/chat/completions -H \"Authorization: Bearer %s\" \\\n", addr, key)
	fmt.Fprintf(w, "    -H 'Content-Type: application/json' -d '{\"model\":\"gpt-4o-mini\",\"messages\":[{\"role\":\"user\",\"content\":\"Hello\"}]}'\n\n")
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
