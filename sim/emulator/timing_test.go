package emulator

import (
	"bufio"
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/llmesh/llmesh/sim/harness/wait"
)

// TestStreamPacing checks lower bounds only: a loaded machine may be late,
// never early.
func TestStreamPacing(t *testing.T) {
	cfg := DefaultConfig()
	cfg.TTFT = 200 * time.Millisecond
	cfg.TPS = 20
	e := start(t, cfg)
	c := newClient(t)
	sent := time.Now()
	resp := do(t, c, "POST", e.URL()+"/v1/chat/completions", body("m", `"stream":true,"max_tokens":10`))
	defer resp.Body.Close()
	if headers := time.Since(sent); headers >= cfg.TTFT {
		t.Logf("headers after %v (no latency configured)", headers)
	}
	var arrivals []time.Duration
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if line := sc.Text(); strings.HasPrefix(line, "data: {") {
			arrivals = append(arrivals, time.Since(sent))
		}
	}
	if len(arrivals) != 11 { // ten tokens and the finish chunk
		t.Fatalf("%d chunks", len(arrivals))
	}
	if arrivals[0] < 200*time.Millisecond {
		t.Errorf("first chunk after %v, before the TTFT", arrivals[0])
	}
	if arrivals[9] < 650*time.Millisecond {
		t.Errorf("last token after %v, before TTFT + 9/TPS", arrivals[9])
	}
	for i := 1; i < 10; i++ {
		if due := cfg.TTFT + time.Duration(i)*50*time.Millisecond; arrivals[i] < due {
			t.Errorf("token %d after %v, due at %v", i, arrivals[i], due)
		}
	}
}

func TestNonStreamingTiming(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Latency = 50 * time.Millisecond
	cfg.TTFT = 100 * time.Millisecond
	cfg.TPS = 100
	e := start(t, cfg)
	c := newClient(t)
	sent := time.Now()
	readAll(t, do(t, c, "POST", e.URL()+"/v1/chat/completions", body("m", `"max_tokens":11`)), 200)
	if took, want := time.Since(sent), 250*time.Millisecond; took < want {
		t.Errorf("answer after %v, want at least %v", took, want)
	}
	sent = time.Now()
	readAll(t, do(t, c, "GET", e.URL()+"/v1/models", ""), 200)
	if took := time.Since(sent); took < cfg.Latency {
		t.Errorf("models after %v, before the latency", took)
	}
}

func TestCancelStopsStream(t *testing.T) {
	cfg := DefaultConfig()
	cfg.TPS = 10
	e := start(t, cfg)
	c := newClient(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	resp := doCtx(t, ctx, c, "POST", e.URL()+"/v1/chat/completions", body("m", `"stream":true,"max_tokens":1000`))
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	if !sc.Scan() || !strings.HasPrefix(sc.Text(), "data: {") {
		t.Fatalf("first event %q: %v", sc.Text(), sc.Err())
	}
	if s := e.Stats(); s.InFlight != 1 || s.Streams != 1 {
		t.Fatalf("stats while streaming %+v", s)
	}
	cancel()
	wait.For(t, 10*time.Second, "the abandoned stream to stop", func() bool { return e.Stats().InFlight == 0 })
	s := e.Stats()
	if s.StreamsCompleted != 0 || s.CompletionTokens < 1 || s.CompletionTokens > 20 {
		t.Errorf("after cancellation %+v", s)
	}
}

func TestSetConfigAtRunTime(t *testing.T) {
	e := start(t, DefaultConfig())
	c := newClient(t)
	readAll(t, do(t, c, "POST", e.URL()+"/v1/chat/completions", body("m", "")), 200)
	cfg := e.Config()
	cfg.Latency = 100 * time.Millisecond
	cfg.APIKey = "k"
	if err := e.SetConfig(cfg); err != nil {
		t.Fatal(err)
	}
	sent := time.Now()
	resp := do(t, c, "POST", e.URL()+"/v1/chat/completions", body("m", ""))
	wantError(t, resp, http.StatusUnauthorized, "invalid_request_error", "", "invalid_api_key")
	if took := time.Since(sent); took < cfg.Latency {
		t.Errorf("answer after %v, before the new latency", took)
	}
	bad := cfg
	bad.TPS = -1
	if err := e.SetConfig(bad); err == nil {
		t.Error("SetConfig accepted a negative TPS")
	}
	if e.Config().TPS != 0 {
		t.Error("a refused config was applied")
	}
}
