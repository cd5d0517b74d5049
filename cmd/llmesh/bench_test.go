package main

import (
	"encoding/json"
	"os/exec"
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
