package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/llmesh/llmesh/sim/emulator"
	"github.com/llmesh/llmesh/sim/engine"
)

func runEmulate(args []string, stdout, stderr io.Writer) int {
	c := emulator.DefaultConfig()
	fs := flag.NewFlagSet("emulate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", "127.0.0.1:8000", "`address` to listen on")
	fs.DurationVar(&c.Latency, "latency", c.Latency, "delay before response headers")
	fs.DurationVar(&c.TTFT, "ttft", c.TTFT, "time to the first token")
	fs.Float64Var(&c.TPS, "tps", c.TPS, "tokens per second after the first (0: as fast as possible)")
	fs.Float64Var(&c.ErrorRate, "error-rate", c.ErrorRate, "fraction of requests answered 500")
	fs.IntVar(&c.RPM, "rpm", c.RPM, "requests per minute before answering 429 (0: unlimited)")
	fs.IntVar(&c.DefaultMaxTokens, "max-tokens", c.DefaultMaxTokens, "completion length when a request gives no max_tokens")
	fs.Int64Var(&c.Seed, "seed", c.Seed, "seed of the generated text and errors")
	keyEnv := fs.String("api-key-env", "", "environment `variable` holding the key clients must send (none: no auth)")
	name := fs.String("name", "emulator", "name shown in logs")
	enginePreset := fs.String("engine", "", "run as an inference engine replica of this `preset` ("+strings.Join(engine.PresetNames(), ", ")+"): queue, KV cache, prefix cache, vLLM's /metrics")
	kvBlocks := fs.Int("kv-blocks", 0, "with -engine, the KV cache's size in `blocks` instead of the preset's (a smaller cache, as a busy deployment's share)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	c.Name = *name
	if *enginePreset != "" {
		ec, ok := engine.Preset(*enginePreset)
		if !ok {
			fmt.Fprintf(stderr, "llmesh emulate: -engine: %q is not one of %s\n", *enginePreset, strings.Join(engine.PresetNames(), ", "))
			return 2
		}
		if *kvBlocks > 0 {
			ec.KVBlocks = *kvBlocks
		}
		c.Engine = &ec
	} else if *kvBlocks > 0 {
		fmt.Fprintln(stderr, "llmesh emulate: -kv-blocks needs -engine")
		return 2
	}
	if *keyEnv != "" {
		if c.APIKey = os.Getenv(*keyEnv); c.APIKey == "" {
			fmt.Fprintf(stderr, "llmesh emulate: -api-key-env: environment variable %s is empty or unset\n", *keyEnv)
			return 2
		}
	}
	e, err := emulator.New(c)
	if err != nil {
		fmt.Fprintf(stderr, "llmesh emulate: %v\n", err)
		return 2
	}
	if err := e.Start(*listen); err != nil {
		fmt.Fprintf(stderr, "llmesh emulate: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "llmesh emulate: serving OpenAI and Azure OpenAI APIs on %s\n", e.URL())
	ctx, stop := untilSignal(stderr)
	defer stop()
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := e.Shutdown(sctx); err != nil {
		fmt.Fprintf(stderr, "llmesh emulate: %v\n", err)
		return 1
	}
	return 0
}
