package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

// Every operator verb that finds no node says which address it tried
// and how to point it elsewhere or start a node.
func TestVerbConnectionErrorsNameTheAddress(t *testing.T) {
	const addr = "http://127.0.0.1:1"
	for _, args := range [][]string{
		{"status", "-addr", addr}, {"members", "-addr", addr}, {"providers", "-addr", addr}, {"join", "-addr", addr, "127.0.0.1:2"},
		{"budgets", "-addr", addr}, {"budgets", "set", "-addr", addr, "t1", "1"}, {"budgets", "forfeit", "-addr", addr, "n1"},
		{"raft", "peers", "-addr", addr}, {"drain", "-addr", addr}, {"leave", "-addr", addr}, {"ready", "-addr", addr},
		{"tenants", "-addr", addr},
	} {
		out, err := exec.Command(binary, args...).CombinedOutput()
		if err == nil {
			t.Errorf("llmesh %s with no node: exit 0\n%s", strings.Join(args, " "), out)
			continue
		}
		for _, want := range []string{"no node answers at " + addr, "-addr", "llmesh agent -dev"} {
			if !strings.Contains(string(out), want) {
				t.Errorf("llmesh %s with no node: the error lacks %q:\n%s", strings.Join(args, " "), want, out)
			}
		}
	}
}

// The providers table shows what an operator needs of the JSON: the
// latency of whole answers and TTFT of streams, "-" until observed.
func TestVerbProvidersTableShowsLatency(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"node":"n1","providers":[
			{"name":"whole","region":"eu-west","reach":"global","jurisdictions":"eu","view":{"latency_ms":123.4},"observers":[]},
			{"name":"streams","region":"eu-west","reach":"global","jurisdictions":"eu","view":{"ttft_ms":45,"latency_ms":0},"observers":[]}]}`)
	}))
	defer srv.Close()
	out := runCLI(t, "providers", "-addr", srv.URL)
	for _, re := range []string{`PROVIDER .*TTFT +LATENCY +ERRORS`, `whole .* healthy +- +123ms +0%`, `streams .* healthy +45ms +- +0%`} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("providers table lacks %s:\n%s", re, out)
		}
	}
}
