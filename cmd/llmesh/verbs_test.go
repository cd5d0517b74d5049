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
		{"tenants", "-addr", addr}, {"spend", "-addr", addr},
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

// fakeNode answers each admin path with its canned JSON.
func fakeNode(t *testing.T, answers map[string]string) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, answers[r.URL.Path])
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// The status and budgets tables show the admission queue, the build, a
// rate share's spare, and what a budget forfeited or overspent.
func TestVerbStatusAndBudgetsTables(t *testing.T) {
	addr := fakeNode(t, map[string]string{
		"/v1/mesh/status": `{"node":"n1","region":"eu-west","jurisdiction":"eu","build":"v1.2.3","phase":"serving","ready":true,
			"role":"voter","raft":"Leader","leader":"n1","members":{"alive":1},"healthy_providers":["p"],"unhealthy_providers":[],
			"budget_leases":[],"rate_shares":[{"provider":"p","rpm":60,"tpm":-1,"spare":7}],
			"admission":{"waiting":2,"waited_total":5,"waited_seconds_total":1.5,"max_wait_s":2,"queue_limit":64},"uptime_s":3}`,
		"/v1/mesh/budgets": `{"consistency":"linearizable","budgets":[{"tenant":"t1","period":"month","limit_usd":1,"settled_usd":1.2,
			"reserved_usd":0,"remaining_usd":0,"forfeited_usd":0.25,"overspend_usd":0.2,"leases":1}]}`,
	})
	status := runCLI(t, "status", "-addr", addr)
	for _, re := range []string{`admission +2 waiting \(at most 64, 2s each\); 5 waited 1.5s in all`, `build +v1.2.3`, `PROVIDER +REQUESTS +TOKENS +SPARE`, `p +60 +unlimited +7`} {
		if !regexp.MustCompile(re).MatchString(status) {
			t.Errorf("status lacks %s:\n%s", re, status)
		}
	}
	budgets := runCLI(t, "budgets", "-addr", addr)
	for _, re := range []string{`FORFEITED +OVERSPENT +LEASES`, `t1 .* \$0.250000 +\$0.200000 +1`} {
		if !regexp.MustCompile(re).MatchString(budgets) {
			t.Errorf("budgets lacks %s:\n%s", re, budgets)
		}
	}
}
