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

// raft peers shows each server's ledger version and the agreed one,
// status the agreed one, and a verb refused for a ledger upgrade prints
// the node's message, which names the voters to upgrade.
func TestVerbsShowTheLedgerVersion(t *testing.T) {
	addr := fakeNode(t, map[string]string{
		"/v1/mesh/raft/peers": `{"peers":[{"id":"n1","address":"10.0.0.1:7947","voter":true,"leader":true,"ledger_version":2},
			{"id":"n2","address":"10.0.0.2:7947","voter":true,"leader":false,"ledger_version":0}],"ledger_version":0}`,
		"/v1/mesh/status": `{"node":"n1","region":"eu-west","jurisdiction":"eu","phase":"serving","ready":true,"role":"voter",
			"raft":"Leader","leader":"n1","ledger_version":0,"members":{"alive":2},"healthy_providers":[],"unhealthy_providers":[],
			"budget_leases":[],"rate_shares":[],"admission":{},"uptime_s":3}`,
	})
	peers := runCLI(t, "raft", "peers", "-addr", addr)
	for _, re := range []string{`NODE +ADDRESS +SUFFRAGE +LEADER +LEDGER VERSION`, `n1 .* voter +leader +2\n`, `n2 .* voter +0\n`, `agreed ledger version: 0`} {
		if !regexp.MustCompile(re).MatchString(peers) {
			t.Errorf("raft peers lacks %s:\n%s", re, peers)
		}
	}
	if status := runCLI(t, "status", "-addr", addr); !regexp.MustCompile(`ledger version +0 \(agreed by the voters\)`).MatchString(status) {
		t.Errorf("status lacks the ledger version:\n%s", status)
	}
	const msg = "ledger upgrade required: set_tenant_limits needs ledger version 1; voter n2 (version 0) must be upgraded first"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusConflict)
		io.WriteString(w, `{"error":{"message":"`+msg+`","type":"invalid_request_error","param":null,"code":"ledger_upgrade_required"}}`)
	}))
	defer srv.Close()
	out, err := exec.Command(binary, "tenants", "limits", "-addr", srv.URL, "acme", "-rpm", "60").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "409 Conflict: "+msg) {
		t.Errorf("a refused verb: %v\n%s", err, out)
	}
}
