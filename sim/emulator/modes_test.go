package emulator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/llmesh/llmesh/sim/harness/wait"
)

func TestRateLimit(t *testing.T) {
	cfg := DefaultConfig()
	cfg.RPM = 2
	e := start(t, cfg)
	c := newClient(t)
	url := e.URL() + "/v1/chat/completions"
	for i, remaining := range []string{"1", "0"} {
		resp := do(t, c, "POST", url, body("m", ""))
		readAll(t, resp, 200)
		h := resp.Header
		if h.Get("x-ratelimit-limit-requests") != "2" || h.Get("x-ratelimit-remaining-requests") != remaining {
			t.Errorf("request %d: limit %q remaining %q", i, h.Get("x-ratelimit-limit-requests"), h.Get("x-ratelimit-remaining-requests"))
		}
		if d, err := time.ParseDuration(h.Get("x-ratelimit-reset-requests")); err != nil || d <= 0 || d > time.Minute {
			t.Errorf("request %d: reset %q", i, h.Get("x-ratelimit-reset-requests"))
		}
	}
	resp := do(t, c, "POST", url, body("m", ""))
	h := resp.Header
	wantError(t, resp, 429, "requests", "", "rate_limit_exceeded")
	// One request comes back every 30s.
	if ra, err := strconv.Atoi(h.Get("Retry-After")); err != nil || ra < 29 || ra > 30 {
		t.Errorf("Retry-After %q", h.Get("Retry-After"))
	}
	if h.Get("x-ratelimit-limit-requests") != "2" || h.Get("x-ratelimit-remaining-requests") != "0" {
		t.Errorf("429 headers %v", h)
	}
	if d, err := time.ParseDuration(h.Get("x-ratelimit-reset-requests")); err != nil || d < 59*time.Second {
		t.Errorf("reset %q", h.Get("x-ratelimit-reset-requests"))
	}

	// Lifting the limit lets requests through, without the headers.
	cfg.RPM = 0
	if err := e.SetConfig(cfg); err != nil {
		t.Fatal(err)
	}
	resp = do(t, c, "POST", url, body("m", ""))
	readAll(t, resp, 200)
	if resp.Header.Get("x-ratelimit-limit-requests") != "" {
		t.Error("rate limit headers without a limit")
	}
}

func TestBucket(t *testing.T) {
	var b bucket
	t0 := time.Unix(1000, 0)
	b.setRPM(60, t0) // one a second
	for i := range 60 {
		if v := b.take(t0); !v.ok || v.remaining != 59-i {
			t.Fatalf("take %d: %+v", i, v)
		}
	}
	v := b.take(t0)
	if v.ok || v.retry != time.Second || v.reset != time.Minute || retryAfterSeconds(v.retry) != 1 {
		t.Errorf("empty bucket: %+v", v)
	}
	if v := b.take(t0.Add(1500 * time.Millisecond)); !v.ok || v.remaining != 0 || v.reset != 59500*time.Millisecond {
		t.Errorf("after 1.5s: %+v", v)
	}
	if v := b.take(t0.Add(1600 * time.Millisecond)); v.ok || v.retry != 400*time.Millisecond || retryAfterSeconds(v.retry) != 1 {
		t.Errorf("after 1.6s: %+v", v)
	}
	b.setRPM(6, t0.Add(time.Hour)) // lowering caps what the bucket holds
	if v := b.take(t0.Add(time.Hour)); !v.ok || v.remaining != 5 {
		t.Errorf("after lowering: %+v", v)
	}
	for _, tc := range []struct {
		d    time.Duration
		want string
	}{{time.Second, "1s"}, {6 * time.Minute, "6m0s"}, {119500 * time.Microsecond, "120ms"}, {1500*time.Millisecond + 1, "1.501s"}, {0, "0s"}} {
		if got := resetString(tc.d); got != tc.want {
			t.Errorf("resetString(%v) = %q, want %q", tc.d, got, tc.want)
		}
	}
}

func TestErrorMode(t *testing.T) {
	e := start(t, DefaultConfig())
	c := newClient(t)
	if err := e.SetMode(ModeError); err != nil {
		t.Fatal(err)
	}
	wantError(t, do(t, c, "POST", e.URL()+"/v1/chat/completions", body("m", "")), 503, "server_error", "", "")
	wantError(t, do(t, c, "GET", e.URL()+"/v1/models", ""), 503, "server_error", "", "")
	if err := e.SetMode(ModeUp); err != nil {
		t.Fatal(err)
	}
	readAll(t, do(t, c, "POST", e.URL()+"/v1/chat/completions", body("m", "")), 200)
}

func TestRefuseThenUpOnTheSamePort(t *testing.T) {
	cfg := DefaultConfig()
	cfg.TTFT = time.Hour // a stream that waits until its connection closes
	e := start(t, cfg)
	c := newClient(t)
	addr := e.Addr()

	resp := do(t, c, "POST", e.URL()+"/v1/chat/completions", body("m", `"stream":true`))
	defer resp.Body.Close()
	if err := e.SetMode(ModeRefuse); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadAll(resp.Body); err == nil {
		t.Error("an open stream survived ModeRefuse")
	}
	req, _ := http.NewRequest("GET", e.URL()+"/v1/models", nil)
	if _, err := c.Do(req); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("in ModeRefuse: %v, want connection refused", err)
	}
	wait.For(t, 10*time.Second, "the cut stream to end", func() bool { return e.Stats().InFlight == 0 })

	cfg.TTFT = 0
	if err := e.SetConfig(cfg); err != nil {
		t.Fatal(err)
	}
	if err := e.SetMode(ModeUp); err != nil {
		t.Fatal(err)
	}
	if e.Addr() != addr {
		t.Errorf("address %s, was %s", e.Addr(), addr)
	}
	readAll(t, do(t, c, "POST", e.URL()+"/v1/chat/completions", body("m", "")), 200)
	if s := e.Stats(); s.Streams != 1 || s.StreamsCompleted != 0 {
		t.Errorf("stats %+v", s)
	}
}

func TestHang(t *testing.T) {
	e := start(t, DefaultConfig())
	c := newClient(t)
	if err := e.SetMode(ModeHang); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", e.URL()+"/v1/chat/completions", nil)
	if _, err := c.Do(req); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("hung request: %v, want deadline exceeded", err)
	}
	wait.For(t, 10*time.Second, "the abandoned request to end", func() bool { return e.Stats().InFlight == 0 })
	if s := e.Stats(); s.Requests != 1 || len(s.ByStatus) != 0 {
		t.Errorf("stats %+v", s)
	}

	// Shutdown lets hung requests go rather than wait for them.
	errc := make(chan error, 1)
	go func() {
		req, _ := http.NewRequest("POST", e.URL()+"/v1/chat/completions", nil)
		resp, err := c.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		errc <- err
	}()
	wait.For(t, 10*time.Second, "the request to hang", func() bool { return e.Stats().InFlight == 1 })
	ctx, cancel = context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := e.Shutdown(ctx); err != nil {
		t.Errorf("Shutdown: %v", err)
	}
	if err := <-errc; err == nil {
		t.Error("a hung request got an answer")
	}
}

func TestCut(t *testing.T) {
	e := start(t, DefaultConfig())
	c := newClient(t)
	if err := e.SetMode(ModeCut); err != nil {
		t.Fatal(err)
	}
	resp := do(t, c, "POST", e.URL()+"/v1/chat/completions", body("m", `"stream":true,"max_tokens":10`))
	data, err := events(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || err == nil {
		t.Errorf("cut stream: status %d, error %v", resp.StatusCode, err)
	}
	if len(data) != 5 {
		t.Errorf("cut stream sent %d chunks, want 5 of 10: %q", len(data), data)
	}
	for _, d := range data {
		if d == "[DONE]" {
			t.Error("cut stream sent [DONE]")
		}
	}

	resp = do(t, c, "POST", e.URL()+"/v1/chat/completions", body("m", ""))
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !errors.Is(err, io.ErrUnexpectedEOF) || len(b) != 0 {
		t.Errorf("cut answer: status %d, %d bytes, error %v", resp.StatusCode, len(b), err)
	}
	wait.For(t, 10*time.Second, "cut requests to end", func() bool { return e.Stats().InFlight == 0 })
	if s := e.Stats(); s.Streams != 1 || s.StreamsCompleted != 0 || s.CompletionTokens != 5 {
		t.Errorf("stats %+v", s)
	}
}

func TestControlEndpoints(t *testing.T) {
	e := start(t, DefaultConfig())
	c := newClient(t)
	mode := func(m string, want int) {
		t.Helper()
		readAll(t, do(t, c, "POST", e.URL()+"/emulator/mode?m="+m, ""), want)
	}
	mode("error", 200)
	if e.Mode() != ModeError {
		t.Errorf("mode %v", e.Mode())
	}
	readAll(t, do(t, c, "POST", e.URL()+"/v1/chat/completions", body("m", "")), 503)
	mode("up", 200)
	readAll(t, do(t, c, "POST", e.URL()+"/v1/chat/completions", body("m", "")), 200)
	mode("sideways", 400)
	readAll(t, do(t, c, "GET", e.URL()+"/emulator/mode?m=up", ""), 405)
	readAll(t, do(t, c, "GET", e.URL()+"/emulator/nothing", ""), 404)

	var s Stats
	if err := json.Unmarshal(readAll(t, do(t, c, "GET", e.URL()+"/emulator/stats", ""), 200), &s); err != nil {
		t.Fatal(err)
	}
	if s.Requests != 2 || s.ByStatus[503] != 1 || s.ByStatus[200] != 1 {
		t.Errorf("stats over HTTP %+v", s)
	}

	mode("refuse", 200)
	req, _ := http.NewRequest("GET", e.URL()+"/emulator/stats", nil)
	if _, err := c.Do(req); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("after refuse over HTTP: %v", err)
	}
	if err := e.SetMode(ModeUp); err != nil {
		t.Fatal(err)
	}
	readAll(t, do(t, c, "GET", e.URL()+"/emulator/stats", ""), 200)
}

// TestHandlerInProcess serves the emulator from a server it does not own.
func TestHandlerInProcess(t *testing.T) {
	e, err := New(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	e.tok = testTokenizer
	srv := httptest.NewServer(e.Handler())
	defer srv.Close()
	c := newClient(t)
	if e.URL() != "" || e.Addr() != "" {
		t.Errorf("URL %q before Start", e.URL())
	}
	readAll(t, do(t, c, "POST", srv.URL+"/v1/chat/completions", body("m", "")), 200)
	if err := e.SetMode(ModeRefuse); err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest("POST", srv.URL+"/v1/chat/completions", nil)
	if resp, err := c.Do(req); err == nil {
		resp.Body.Close()
		t.Error("ModeRefuse without a listener answered")
	}
	if err := e.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := e.Shutdown(context.Background()); err != nil {
		t.Errorf("second Shutdown: %v", err)
	}
	if err := e.Start("127.0.0.1:0"); err == nil {
		t.Error("Start after Shutdown")
	}
	if err := e.SetMode(ModeUp); err == nil {
		t.Error("SetMode after Shutdown")
	}
}

func TestShutdownCutsLongStreams(t *testing.T) {
	cfg := DefaultConfig()
	cfg.TPS = 1
	e, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	e.tok = testTokenizer
	if err := e.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	c := newClient(t)
	resp := do(t, c, "POST", e.URL()+"/v1/chat/completions", body("m", `"stream":true,"max_tokens":1000`))
	defer resp.Body.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := e.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Shutdown: %v, want deadline exceeded", err)
	}
	if s := e.Stats(); s.InFlight != 0 || s.StreamsCompleted != 0 {
		t.Errorf("after Shutdown: %+v", s)
	}
	if _, err := io.ReadAll(resp.Body); err == nil {
		t.Error("the stream ended cleanly")
	}
}

func TestModeNames(t *testing.T) {
	for m := ModeUp; m <= ModeContextLength; m++ {
		got, err := ParseMode(m.String())
		if err != nil || got != m {
			t.Errorf("ParseMode(%q) = %v, %v", m.String(), got, err)
		}
	}
	if _, err := ParseMode("down"); err == nil {
		t.Error("ParseMode accepted down")
	}
	e, _ := New(DefaultConfig())
	if err := e.SetMode(Mode(42)); err == nil {
		t.Error("SetMode accepted Mode(42)")
	}
}

func TestStartInRefuseMode(t *testing.T) {
	e, err := New(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	e.tok = testTokenizer
	t.Cleanup(func() { _ = e.Shutdown(context.Background()) })
	if err := e.SetMode(ModeRefuse); err != nil {
		t.Fatal(err)
	}
	if err := e.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	if err := e.Start("127.0.0.1:0"); err == nil {
		t.Error("second Start")
	}
	c := newClient(t)
	req, _ := http.NewRequest("GET", e.URL()+"/v1/models", nil)
	if _, err := c.Do(req); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("started in ModeRefuse: %v", err)
	}
	if err := e.SetMode(ModeUp); err != nil {
		t.Fatal(err)
	}
	readAll(t, do(t, c, "GET", e.URL()+"/v1/models", ""), 200)
}

// TestConcurrentRequests runs requests of every kind while the
// configuration changes, for the race detector.
func TestConcurrentRequests(t *testing.T) {
	cfg := DefaultConfig()
	cfg.RPM = 1000
	e := start(t, cfg)
	c := newClient(t)
	bodies := []string{
		body("m", ""),
		body("m", `"stream":true,"stream_options":{"include_usage":true},"n":2`),
		body("m", weatherTools+`,"stream":true`),
		body("m", weatherTools),
	}
	done := make(chan error)
	for g := range 8 {
		go func() {
			for i := range 10 {
				req, _ := http.NewRequest("POST", e.URL()+"/v1/chat/completions", strings.NewReader(bodies[(g+i)%len(bodies)]))
				resp, err := c.Do(req)
				if err != nil {
					done <- err
					return
				}
				_, err = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if err != nil || resp.StatusCode != 200 {
					done <- fmt.Errorf("status %d: %v", resp.StatusCode, err)
					return
				}
			}
			done <- nil
		}()
	}
	for i := range 5 {
		cfg.TPS = float64(1000 * (i + 1))
		if err := e.SetConfig(cfg); err != nil {
			t.Fatal(err)
		}
		_ = e.Stats()
		_ = e.Received()
	}
	for range 8 {
		if err := <-done; err != nil {
			t.Error(err)
		}
	}
	if s := e.Stats(); s.Requests != 80 || s.ByStatus[200] != 80 || s.InFlight != 0 || s.StreamsCompleted != s.Streams {
		t.Errorf("stats %+v", s)
	}
}
