package node_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/llmesh/llmesh/node"
	"github.com/llmesh/llmesh/sim/emulator"
	"github.com/llmesh/llmesh/sim/harness/wait"
)

// The cheapest provider is the broken one, so every request tries it
// first and must end at the healthy, dearer one.
func TestFailoverBeforeFirstByte(t *testing.T) {
	for _, tc := range []struct {
		name   string
		broken upstream
	}{
		{"connection refused", upstream{name: "broken", kind: "openai", in: 0.1, out: 0.1, noEmulator: true}},
		{"5xx", upstream{name: "broken", kind: "openai", in: 0.1, out: 0.1, emu: emulator.Config{ErrorRate: 1}}},
		{"429", upstream{name: "broken", kind: "openai", in: 0.1, out: 0.1, emu: emulator.Config{RPM: 1}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := startNode(t, []upstream{tc.broken, {name: "healthy", kind: "azure", in: 1, out: 1}}, nil)
			served := map[string]int{}
			for i := range 3 {
				for _, body := range []string{hello, strings.Replace(hello, `"messages"`, `"stream":true,"messages"`, 1)} {
					resp := f.post(body)
					out := readAll(t, resp.Body)
					if resp.StatusCode != 200 {
						t.Fatalf("request %d: %d %s", i, resp.StatusCode, out)
					}
					if strings.Contains(body, "stream") && !strings.HasSuffix(out, "data: [DONE]\n\n") {
						t.Fatalf("stream not complete: %q", out)
					}
					served[resp.Header.Get("X-LLMesh-Provider")]++
				}
			}
			if tc.name == "429" {
				// The one request the bucket allows went to broken.
				if served["broken"] != 1 || served["healthy"] != 5 {
					t.Fatalf("served %v", served)
				}
				return
			}
			if served["healthy"] != 6 {
				t.Fatalf("served %v", served)
			}
		})
	}
}

// A 429 cools the provider down for its Retry-After without counting as a
// failure; once the cooldown passes it takes traffic again.
func TestRateLimitedProviderSkippedUntilRetryAfter(t *testing.T) {
	f := startNode(t, []upstream{
		{name: "cheap", kind: "openai", in: 0.1, out: 0.1},
		{name: "dear", kind: "openai", in: 1, out: 1},
	}, func(c *node.Config) { c.Outlier.ConsecutiveFailures = 1 })
	cheap := f.emus["cheap"]
	// 60 RPM: a bucket of 60 refilled at one a second. Once it is empty
	// the emulator answers 429 with Retry-After: 1.
	cfg := cheap.Config()
	cfg.RPM = 60
	if err := cheap.SetConfig(cfg); err != nil {
		t.Fatal(err)
	}
	var limitedAt time.Time
	for i := 0; limitedAt.IsZero(); i++ {
		if i > 100 {
			t.Fatal("no 429 after 100 requests")
		}
		sent := time.Now() // the 429 came after this
		resp := f.post(hello)
		if resp.StatusCode != 200 {
			t.Fatalf("status %d", resp.StatusCode)
		}
		if strings.Contains(resp.Header.Get("X-LLMesh-Route"), "failed over from cheap (429)") {
			limitedAt = sent
		}
	}
	// Until Retry-After passes, cheap is not tried: dear serves, and the
	// emulator sees no further request. Once it passes, cheap serves again
	// (and was not ejected, although one failure would have ejected it).
	before := cheap.Stats().Requests
	var back time.Time
	for back.IsZero() {
		resp := f.post(hello)
		if resp.StatusCode != 200 {
			t.Fatalf("status %d", resp.StatusCode)
		}
		switch p := resp.Header.Get("X-LLMesh-Provider"); {
		case p == "cheap":
			back = time.Now()
		case time.Since(limitedAt) > 5*time.Second:
			t.Fatal("cheap not back 5s after a Retry-After of 1s")
		case cheap.Stats().Requests != before:
			t.Fatalf("cheap was tried during its cooldown (%v after the 429)", time.Since(limitedAt))
		}
		time.Sleep(20 * time.Millisecond) // pacing the client, not waiting for a condition
	}
	if d := back.Sub(limitedAt); d < 900*time.Millisecond {
		t.Fatalf("cheap back %v after the 429, before its Retry-After of 1s", d)
	}
	if st := cheap.Stats(); st.ByStatus[429] != 1 {
		t.Fatalf("cheap answered 429 %d times", st.ByStatus[429])
	}
}

// Consecutive failures eject a provider; after the backoff one probe goes
// through, and once the provider recovers it takes the traffic back.
func TestEjectionAndRecovery(t *testing.T) {
	f := startNode(t, []upstream{
		{name: "cheap", kind: "openai", in: 0.1, out: 0.1},
		{name: "dear", kind: "openai", in: 1, out: 1},
	}, func(c *node.Config) {
		c.Outlier = node.OutlierSection{ConsecutiveFailures: 3, BaseEjection: node.Duration(300 * time.Millisecond)}
	})
	cheap := f.emus["cheap"]
	if err := cheap.SetMode(emulator.ModeError); err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		resp := f.post(hello)
		if resp.StatusCode != 200 || resp.Header.Get("X-LLMesh-Provider") != "dear" {
			t.Fatalf("request %d: %d from %q", i, resp.StatusCode, resp.Header.Get("X-LLMesh-Provider"))
		}
	}
	// Three failures ejected it; the rest did not reach it.
	if n := cheap.Stats().Requests; n != 3 {
		t.Fatalf("cheap got %d requests, want 3 before ejection", n)
	}
	if !strings.Contains(readAll(t, mustGet(t, f.url+"/metrics").Body), `llmesh_provider_ejections_total{provider="cheap"} 1`) {
		t.Fatal("ejection not in metrics")
	}
	if err := cheap.SetMode(emulator.ModeUp); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 10*time.Second, "cheap to take traffic again", func() bool {
		resp := f.post(hello)
		return resp.StatusCode == 200 && resp.Header.Get("X-LLMesh-Provider") == "cheap"
	})
	for range 5 {
		if p := f.post(hello).Header.Get("X-LLMesh-Provider"); p != "cheap" {
			t.Fatalf("after recovery served by %s", p)
		}
	}
}

// The cheaper healthy provider takes the traffic; when it is down the
// other one does, and it takes it back when it returns.
func TestCheapestHealthyProviderWins(t *testing.T) {
	f := startNode(t, []upstream{
		{name: "dear", kind: "azure", in: 2.5, out: 10},
		{name: "cheap", kind: "openai", in: 0.15, out: 0.6},
	}, func(c *node.Config) {
		c.Outlier = node.OutlierSection{ConsecutiveFailures: 2, BaseEjection: node.Duration(200 * time.Millisecond)}
	})
	count := func(n int) map[string]int {
		m := map[string]int{}
		for range n {
			resp := f.post(hello)
			if resp.StatusCode != 200 {
				t.Fatalf("status %d", resp.StatusCode)
			}
			m[resp.Header.Get("X-LLMesh-Provider")]++
		}
		return m
	}
	if m := count(20); m["cheap"] != 20 {
		t.Fatalf("healthy: %v", m)
	}
	if err := f.emus["cheap"].SetMode(emulator.ModeRefuse); err != nil {
		t.Fatal(err)
	}
	if m := count(20); m["dear"] != 20 {
		t.Fatalf("cheap down: %v", m)
	}
	if err := f.emus["cheap"].SetMode(emulator.ModeUp); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 10*time.Second, "cheap to return", func() bool { return count(1)["cheap"] == 1 })
	// Cost in the metrics is at the cheap provider's prices.
	body := readAll(t, mustGet(t, f.url+"/metrics").Body)
	if !strings.Contains(body, `llmesh_cost_usd_total{model="gpt-4o-mini",provider="cheap",tenant="t1"}`) {
		t.Fatal("no cost recorded for cheap")
	}
}

// A provider that refuses the request itself (400) is not failed over:
// the client sees the provider's answer.
func TestUpstreamClientErrorIsRelayed(t *testing.T) {
	f := startNode(t, []upstream{{name: "a", kind: "openai", in: 0.1}, {name: "b", kind: "openai", in: 1}}, nil)
	// The emulator refuses max_tokens beyond its cap with 400.
	resp := f.post(`{"model":"gpt-4o-mini","max_tokens":1000000,"messages":[{"role":"user","content":"hi"}]}`)
	var doc struct {
		Error struct{ Message, Param string }
	}
	_ = json.NewDecoder(resp.Body).Decode(&doc)
	if resp.StatusCode != 400 || doc.Error.Message == "" || f.emus["b"].Stats().Requests != 0 {
		t.Fatalf("got %d %+v; b saw %d requests", resp.StatusCode, doc, f.emus["b"].Stats().Requests)
	}
}
