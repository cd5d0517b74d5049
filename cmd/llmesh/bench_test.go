package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"slices"
	"sync"
	"testing"
)

// `llmesh bench` as the README runs it, briefly: the emulator, the bare
// proxy, nginx when installed, and a node, each its own process, under
// the same interleaved load. A smoke test: every target answers, the
// node and the emulator answer every request; no timing is asserted.
func TestBenchSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("starts several processes: not with -short")
	}
	out, err := exec.Command(binary, "bench", "-rate", "100", "-duration", "1s", "-slice", "500ms", "-stream", "0.2", "-json").Output()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	var doc struct {
		Results []struct {
			Target                  string
			Sent, OK, Errors, Trunc int
			P50                     int64 `json:"p50_ns"`
			CPU                     int64 `json:"cpu_per_request_ns"`
		}
		Added []struct{ Target string } `json:"added_over_direct"`
	}
	if err := json.Unmarshal(out, &doc); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	seen := map[string]bool{}
	for _, r := range doc.Results {
		seen[r.Target] = true
		if r.Sent != 100 || r.P50 <= 0 {
			t.Fatalf("%s: %+v", r.Target, r)
		}
		if (r.Target == "direct" || r.Target == "llmesh") && (r.OK != r.Sent || r.CPU <= 0) {
			t.Fatalf("%s: %+v", r.Target, r)
		}
	}
	if !seen["direct"] || !seen["go-proxy"] || !seen["llmesh"] || len(doc.Added) != len(doc.Results)-1 {
		t.Fatalf("results: %s", out)
	}
	if _, err := exec.LookPath("nginx"); err == nil && !seen["nginx"] {
		t.Fatalf("nginx is installed but was not measured: %s", out)
	} else if err != nil {
		t.Log("nginx is not installed: its column is left out (.ci/run installs nginx-light)")
	}
}

// `llmesh bench -workload shared-prefix`, briefly and small: a row for
// each replica policy and the oracle, in order, every request answered,
// and the answers' cached tokens reach the report (the prefix policy and
// the oracle, which keep a conversation on one replica, hit its cache).
// The report's shape, not its figures: no timing is asserted.
func TestBenchSharedPrefixSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("starts several processes: not with -short")
	}
	out, err := exec.Command(binary, "bench", "-workload", "shared-prefix", "-tenants", "4", "-prefix-words", "300",
		"-turns", "3", "-max-tokens", "8", "-rate", "12", "-duration", "1500ms", "-drain", "10s", "-json").Output()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	var doc struct {
		KVBlocks int `json:"kv_blocks"`
		Results  []struct {
			Target                           string
			Requests, OK, Errors, Unfinished int
			TTFT50                           int64   `json:"ttft_p50_ns"`
			TTFT90                           int64   `json:"ttft_p90_ns"`
			OutputTPS                        float64 `json:"output_tokens_per_s"`
			PromptTokens                     int64   `json:"prompt_tokens"`
			Cached                           int64   `json:"cached_tokens"`
			HitRate                          float64 `json:"hit_rate"`
		}
	}
	if err := json.Unmarshal(out, &doc); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	var got []string
	for _, r := range doc.Results {
		got = append(got, r.Target)
		if r.Requests == 0 || r.OK != r.Requests || r.TTFT50 <= 0 || r.TTFT90 < r.TTFT50 || r.OutputTPS <= 0 ||
			r.PromptTokens < int64(r.OK)*300 || r.HitRate < 0 || r.HitRate > 1 {
			t.Fatalf("%s: %+v\n%s", r.Target, r, out)
		}
		if (r.Target == "prefix" || r.Target == "oracle") && r.Cached == 0 {
			t.Fatalf("%s: no cached token in %d answers: %+v", r.Target, r.OK, r)
		}
	}
	if want := []string{"round_robin", "least_loaded", "session", "prefix", "oracle"}; !slices.Equal(got, want) || doc.KVBlocks <= 0 {
		t.Fatalf("rows %v, want %v; kv_blocks %d", got, want, doc.KVBlocks)
	}
}

// `llmesh bench -workload spill`, shortened: an eu tenant's requests go
// to the local GPU replicas while they have room, to the compliant eu
// cloud while they are saturated, back to the GPUs when the load falls,
// and never to the cheaper us cloud; every request is answered; and the
// simulator, given the same mesh and arrivals, predicts the GPUs' share
// of the run within 10 points of what the live node did (issue 22).
func TestBenchSpillMatchesTheSimulator(t *testing.T) {
	if testing.Short() {
		t.Skip("starts several processes and runs for half a minute: not with -short")
	}
	out, err := exec.Command(binary, "bench", "-workload", "spill", "-phases", "6s@4,12s@16,12s@3", "-drain", "20s", "-json").Output()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	type phase struct {
		Requests, OK int
		ServedBy     map[string]int `json:"served_by"`
	}
	var doc struct {
		Live struct {
			Phases       []phase
			Requests, OK int
			ServedBy     map[string]int `json:"served_by"`
			FirstError   string         `json:"first_error"`
		}
		Simulated struct {
			Requests            int
			ServedBy            map[string]int `json:"served_by"`
			ResidencyViolations int            `json:"residency_violations"`
		}
		GapAll float64 `json:"gap_all"`
	}
	if err := json.Unmarshal(out, &doc); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	live := doc.Live
	t.Logf("live %v by phase %v; simulated %v; gap %.3f", live.ServedBy, live.Phases, doc.Simulated.ServedBy, doc.GapAll)
	if live.Requests == 0 || live.OK != live.Requests || len(live.Phases) != 3 || doc.Simulated.Requests != live.Requests {
		t.Fatalf("%d of %d answered (%s), %d simulated: %s", live.OK, live.Requests, live.FirstError, doc.Simulated.Requests, out)
	}
	if live.ServedBy["cloud-us"] != 0 || doc.Simulated.ServedBy["cloud-us"] != 0 || doc.Simulated.ResidencyViolations != 0 {
		t.Fatalf("an eu tenant's request went to the us cloud: live %v, simulated %v", live.ServedBy, doc.Simulated.ServedBy)
	}
	gpu := func(p phase) float64 { return float64(p.ServedBy["gpu"]) / float64(max(p.OK, 1)) }
	if g := gpu(live.Phases[0]); g < 0.9 {
		t.Errorf("with room, the GPUs served %.0f%% of the requests", 100*g)
	}
	if g := gpu(live.Phases[1]); g > 0.8 {
		t.Errorf("saturated, the GPUs still served %.0f%%: nothing spilled to the eu cloud", 100*g)
	}
	if gpu(live.Phases[2]) <= gpu(live.Phases[1]) {
		t.Errorf("the GPUs' share did not come back as the load fell: %v", live.Phases)
	}
	if doc.GapAll > 0.10 {
		t.Errorf("the simulator's GPU share is %.1f points from the live node's: %v against %v", 100*doc.GapAll, doc.Simulated.ServedBy, live.ServedBy)
	}
}

// `llmesh bench -peer`: another gateway pointed at the bench's emulator,
// at the address -emulator fixes, is loaded beside the others on every
// endpoint asked for, under the model name -peer-model gives it for
// each, with its key from the environment. The gateway here is the
// test's own, which records what it is sent (a bare httputil.ReverseProxy
// cuts an answer now and then: see docs/performance.md).
func TestBenchPeer(t *testing.T) {
	if testing.Short() {
		t.Skip("starts several processes: not with -short")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	emu := ln.Addr().String()
	ln.Close()
	var mu sync.Mutex
	seen := map[string]map[string]int{} // path → model → requests
	keys := map[string]int{}
	upstream := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	gw := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var req struct{ Model string }
		_ = json.Unmarshal(body, &req)
		mu.Lock()
		if seen[r.URL.Path] == nil {
			seen[r.URL.Path] = map[string]int{}
		}
		seen[r.URL.Path][req.Model]++
		keys[r.Header.Get("Authorization")]++
		mu.Unlock()
		up, _ := http.NewRequestWithContext(r.Context(), http.MethodPost, "http://"+emu+r.URL.Path, bytes.NewReader(body))
		up.Header.Set("Content-Type", "application/json")
		resp, err := upstream.Do(up)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		w.Header().Set("Content-Type", resp.Header.Get("Content-Type"))
		w.WriteHeader(resp.StatusCode)
		buf := make([]byte, 4<<10)
		for {
			n, err := resp.Body.Read(buf)
			_, _ = w.Write(buf[:n])
			http.NewResponseController(w).Flush()
			if err != nil {
				return
			}
		}
	}))
	t.Cleanup(func() { gw.Close(); upstream.CloseIdleConnections() })
	addr := gw.Listener.Addr().String()

	cmd := exec.Command(binary, "bench", "-rate", "50", "-duration", "1s", "-stream", "0.5", "-endpoint", "chat,embeddings,responses",
		"-emulator", emu, "-peer", "http://"+addr+"/v1", "-peer-model", "chat=gpt-4o-mini,embeddings=text-embedding-3-large", "-json")
	cmd.Env = append(os.Environ(), "LLMESH_BENCH_PEER_KEY=sk-peer-secret")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	var doc struct {
		Runs []struct {
			Endpoint string
			Results  []struct {
				Target                      string
				Sent, OK, Errors, Truncated int
			}
			Added []struct{ Target string } `json:"added_over_direct"`
		}
	}
	if err := json.Unmarshal(out, &doc); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	var apis []string
	for _, run := range doc.Runs {
		apis = append(apis, run.Endpoint)
		var peerRow bool
		for _, r := range run.Results {
			if r.Target == "peer" {
				peerRow = true
				if r.Sent != 50 || r.OK != r.Sent {
					t.Errorf("%s: the peer: %+v", run.Endpoint, r)
				}
			}
			if r.Target == "llmesh" && r.OK != r.Sent {
				t.Errorf("%s: the node: %+v", run.Endpoint, r)
			}
		}
		if !peerRow || !slices.ContainsFunc(run.Added, func(a struct{ Target string }) bool { return a.Target == "peer" }) {
			t.Errorf("%s: no row for the peer: %s", run.Endpoint, out)
		}
	}
	if !slices.Equal(apis, []string{"chat", "embeddings", "responses"}) {
		t.Fatalf("runs %v, want chat, embeddings, responses", apis)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(keys) != 1 || keys["Bearer sk-peer-secret"] == 0 {
		t.Errorf("the peer was sent the keys %v, want only LLMESH_BENCH_PEER_KEY's", keys)
	}
	for path, model := range map[string]string{"/v1/chat/completions": "gpt-4o-mini", "/v1/embeddings": "text-embedding-3-large",
		"/v1/responses": "gpt-4o-mini"} { // responses: not named in -peer-model, the bench's own
		if got := seen[path]; len(got) != 1 || got[model] == 0 {
			t.Errorf("the peer was asked on %s for the models %v, want %s", path, got, model)
		}
	}
}

func TestBenchEndpointAndPeerModelFlags(t *testing.T) {
	if got, err := benchEndpoints("responses, chat,responses"); err != nil || !slices.Equal(got, []string{"responses", "chat"}) {
		t.Errorf("benchEndpoints: %v, %v", got, err)
	}
	if _, err := benchEndpoints("chat,rerank"); err == nil {
		t.Error("benchEndpoints took rerank")
	}
	if m, err := peerModels("mine"); err != nil || m["chat"] != "mine" || m["embeddings"] != "mine" || m["responses"] != "mine" {
		t.Errorf("peerModels(mine): %v, %v", m, err)
	}
	if m, err := peerModels("chat=a,embeddings=b"); err != nil || m["chat"] != "a" || m["embeddings"] != "b" || m["responses"] != "" {
		t.Errorf("peerModels(pairs): %v, %v", m, err)
	}
	for _, bad := range []string{"chat=", "rerank=x", "chat=a,b"} {
		if _, err := peerModels(bad); err == nil {
			t.Errorf("peerModels(%q) took it", bad)
		}
	}
}
