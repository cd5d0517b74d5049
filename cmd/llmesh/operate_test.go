package main

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/llmesh/llmesh/sim/emulator"
	"github.com/llmesh/llmesh/sim/harness"
	"github.com/llmesh/llmesh/sim/harness/wait"
)

// The operations tests run real agent processes on loopback: three voters
// in three regions under steady load from the official openai client
// through a load balancer (see balancer), and drain, add, kill and
// restart nodes while the load runs.

// opsPrice is every provider's price per token, in and out: a budget of
// opsBudget lasts a few seconds of the capped tenant's share of the load.
// Draining one node under load: zero failed requests, zero truncated
// streams, and the node exits 0. Then a node added live takes traffic
// within seconds, and joins Raft as a voter.
func TestDrainAndJoinUnderLoad(t *testing.T) {
	m := startOpsMesh(t)
	stop := m.loadFor()
	time.Sleep(3 * time.Second) // load runs: the time is the test's, not a wait for a condition
	out, err := exec.Command(binary, "drain", "-wait", "-addr", m.nodes["eu-1"].http).CombinedOutput()
	if err != nil {
		t.Fatalf("llmesh drain -wait: %v\n%s", err, out)
	}
	t.Logf("llmesh drain -wait:\n%s", out)
	// Once drain -wait is back, the node is out of Raft as its peers see
	// it: what an operator reads next is true at once.
	if !strings.Contains(string(out), "eu-1 has left the mesh and Raft") {
		t.Fatalf("drain -wait did not follow the node out of the mesh:\n%s", out)
	}
	peers, err := exec.Command(binary, "raft", "peers", "-addr", m.nodes["us-1"].http).CombinedOutput()
	if err != nil || strings.Contains(string(peers), "eu-1") {
		t.Fatalf("right after drain -wait, raft peers at us-1: %v\n%s", err, peers)
	}
	if code := m.waitExit("eu-1", 40*time.Second); code != 0 {
		t.Fatalf("the drained node exited %d; its log:\n%s", code, m.nodes["eu-1"].log.String())
	}
	m.lb.Remove("eu-1")
	m.awaitVoters(2, 15*time.Second)

	m.define("eu-2", "eu-west")
	added := time.Now()
	m.start("eu-2")
	m.awaitReady("eu-2", 30*time.Second)
	m.awaitVoters(3, 20*time.Second)
	time.Sleep(2 * time.Second) // load runs with the new node: the time is the test's
	rep := stop()
	m.requireClean(rep)
	first, ok := rep.FirstAt["eu-2"]
	if !ok {
		t.Fatalf("the node added live took no traffic: %s", rep)
	}
	t.Logf("the node added live answered its first request %s after it was started", first.Sub(added).Round(time.Millisecond))
	m.checkBudget(rep)
}

// kill -9 of the Raft leader under load: the failed requests are at most
// those in flight on it, the others elect a leader, and the budget is
// never overspent.
func TestLeaderKilledUnderLoad(t *testing.T) {
	m := startOpsMesh(t)
	stop := m.loadFor()
	time.Sleep(3 * time.Second) // load runs before the kill: the time is the test's
	leader, _ := m.raft()
	if leader == "" {
		t.Fatal("no leader")
	}
	killed := time.Now()
	if err := m.nodes[leader].cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	m.waitExit(leader, 10*time.Second)
	// In flight on it when it died: sent before its death was seen, not
	// answered before the signal was sent.
	inflight := m.lb.InFlightDuring(leader, killed, time.Now())
	wait.Every(50*time.Millisecond).For(t, 30*time.Second, "a new leader", func() bool {
		l, _ := m.raft()
		return l != "" && l != leader
	})
	elected := time.Since(killed)
	time.Sleep(5 * time.Second) // load runs under the new leader: the time is the test's
	rep := stop()
	t.Logf("killed leader %s with %d requests in flight on it; a new leader %s later", leader, inflight, elected.Round(time.Millisecond))
	t.Logf("load: %s; connections refused and sent to another node: %d", rep, m.lb.Refused())
	if len(rep.Failures) > inflight {
		f, _ := rep.FirstFailures()
		t.Fatalf("%d requests failed, more than the %d in flight on the killed node (first ten): %q", len(rep.Failures), inflight, f)
	}
	for _, f := range rep.Failures {
		if !strings.Contains(f, `node "`+leader+`"`) && !strings.Contains(f, `node ""`) {
			t.Errorf("a request failed that the killed node was not serving: %s", f)
		}
	}
	if elected > 15*time.Second {
		t.Fatalf("a new leader took %s", elected)
	}
	m.checkBudget(rep)
}

// A rolling restart of all three nodes, one by one, under load (SIGTERM,
// which drains; start again with the same data; wait until it is ready
// and a voter again): zero failed requests.
func TestRollingRestartUnderLoad(t *testing.T) {
	m := startOpsMesh(t)
	stop := m.loadFor()
	time.Sleep(2 * time.Second) // load runs before the restarts: the time is the test's
	for _, name := range []string{"eu-1", "us-1", "ap-1"} {
		began := time.Now()
		if err := m.nodes[name].cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if code := m.waitExit(name, 40*time.Second); code != 0 {
			t.Fatalf("%s exited %d after SIGTERM; its log:\n%s", name, code, m.nodes[name].log.String())
		}
		m.start(name)
		m.awaitReady(name, 30*time.Second)
		m.awaitVoters(3, 30*time.Second)
		t.Logf("%s restarted: ready and a voter again %s after SIGTERM", name, time.Since(began).Round(time.Millisecond))
	}
	time.Sleep(2 * time.Second) // and after them
	rep := stop()
	m.requireClean(rep)
	for _, name := range []string{"eu-1", "us-1", "ap-1"} {
		if rep.ByNode[name] == 0 {
			t.Fatalf("%s answered nothing: %s", name, rep)
		}
	}
	m.checkBudget(rep)
}

// TestDemo runs `llmesh demo` as the README does: three regions, a table
// of where the requests went in which residency always holds, a working
// `llmesh status` against a node, and a clean exit on Ctrl-C.
func TestDemo(t *testing.T) {
	cmd, out, stderr := started(t, "demo", "-http", "127.0.0.1:0")
	var lines []string
	done := make(chan error, 1)
	go func() {
		for {
			line, err := out.ReadString('\n')
			lines = append(lines, strings.TrimRight(line, "\n"))
			if strings.Contains(line, "keeps serving") || err != nil {
				done <- err
				return
			}
		}
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("demo output ended (%v):\n%s\n%s", err, strings.Join(lines, "\n"), stderr)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the demo did not finish its traffic within 60s")
	}
	text := strings.Join(lines, "\n")
	t.Log(text)
	var usAPI string
	forwarded := false
	for _, l := range lines {
		f := strings.Fields(l)
		if len(f) == 4 && f[0] == "us-1" {
			usAPI = f[3]
		}
		if len(f) < 9 || (f[0] != "acme" && f[0] != "globex") {
			continue
		}
		// TENANT RESIDENCY ENTERED MODEL SESSION ANSWER PROVIDER REPLICA CALLED-BY
		tenant, entry, answer, provider, via := f[0], f[2], f[5], f[6], f[8]
		if answer != "200" {
			t.Errorf("%s at %s answered %s", tenant, entry, answer)
		}
		if tenant == "acme" && !strings.HasSuffix(provider, "-eu") || tenant == "globex" && !strings.HasSuffix(provider, "-us") {
			t.Errorf("residency broken: %s served by %s: %s", tenant, provider, l)
		}
		if tenant == "acme" && provider == "gpu-eu" && entry != "eu-1" && via == "eu-1" {
			forwarded = true
		}
	}
	if !forwarded {
		t.Error("no acme request entering outside eu-west was forwarded to eu-1 for gpu-eu")
	}
	if !strings.Contains(text, "budget_exceeded") {
		t.Error("initech's budget never ran out")
	}
	// No request of a tenant with budget left is refused: none was
	// retried after a 429, and initech's answers are 200s until its
	// budget is spent, then 402s.
	if strings.Contains(text, "×429") {
		t.Error("a request was refused with 429 and retried")
	}
	spent := false
	for _, l := range lines {
		if f := strings.Fields(l); len(f) < 6 || f[0] != "initech" || !strings.Contains(l, "gpt-4o-mini") {
			continue
		}
		switch ok := strings.Contains(l, " 200 "); {
		case strings.Contains(l, " 402 budget_exceeded"):
			spent = true
		case spent || !ok:
			t.Errorf("initech answered other than 200 before its budget ran out, or than 402 after: %s", l)
		}
	}
	if usAPI == "" {
		t.Fatal("no address for us-1")
	}
	if !strings.Contains(text, "/ui/") {
		t.Error("the demo does not print the dashboard's URL")
	}
	if out := runCLI(t, "status", "-addr", usAPI); !strings.Contains(out, "us-1 (us-east, us)") || !strings.Contains(out, "3 alive") {
		t.Fatalf("status:\n%s", out)
	}
	stopDemo(t, cmd, out, stderr)
}

// SIGHUP reloads providers from the file: a provider added to it takes
// traffic without a restart; a file that would change the node section
// is refused (logged with the field) and the agent keeps serving.
func TestSIGHUPReloads(t *testing.T) {
	e1, e2 := harness.StartEmulator(t, emulator.DefaultConfig()), harness.StartEmulator(t, emulator.DefaultConfig())
	key := "sk-reload-test-key-0001"
	dir := t.TempDir()
	write := func(region string, providers string) string {
		path := filepath.Join(dir, "node.yaml")
		cfg := fmt.Sprintf(`node: {name: r1, region: %s, data_dir: %s, http: "127.0.0.1:0"}
regions: [{name: eu-west, jurisdiction: eu}, {name: us-east, jurisdiction: us}]
probes: {disabled: true}
tenants: [{name: t, key_sha256: [%s]}]
providers:
%s`, region, dir, harness.KeySHA256(key), providers)
		if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	one := fmt.Sprintf("  - {name: first, region: eu-west, base_url: %q, models: [{name: m, input_usd_per_mtok: 5}]}\n", e1.URL())
	two := one + fmt.Sprintf("  - {name: second, region: eu-west, base_url: %q, models: [{name: m, input_usd_per_mtok: 1}]}\n", e2.URL())
	path := write("eu-west", one)
	cmd := exec.Command(binary, "agent", "-config", path)
	stderr := &syncLog{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	var base string
	started := regexp.MustCompile(`msg="node started".* http=(\S+)`)
	wait.Every(20*time.Millisecond).Until(t, 20*time.Second, "the agent to start", func() error {
		if m := started.FindStringSubmatch(stderr.String()); m != nil {
			base = "http://" + m[1]
			return nil
		}
		return fmt.Errorf("its log:\n%s", stderr)
	})
	provider := func() string {
		req, _ := http.NewRequest(http.MethodPost, base+"/v1/chat/completions", strings.NewReader(`{"model":"m","max_tokens":2,"messages":[{"role":"user","content":"x"}]}`))
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.Header.Get("X-Llmesh-Provider")
	}
	if p := provider(); p != "first" {
		t.Fatalf("before the reload: %q", p)
	}
	write("eu-west", two)
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	wait.Every(50*time.Millisecond).Until(t, 10*time.Second, "the cheaper provider added by SIGHUP to take traffic", func() error {
		if provider() == "second" {
			return nil
		}
		return fmt.Errorf("its log:\n%s", stderr)
	})
	write("us-east", two)
	if err := cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	wait.Every(50*time.Millisecond).Until(t, 10*time.Second, "a changed region to be refused by name", func() error {
		if strings.Contains(stderr.String(), "node.region changed: restart the node") {
			return nil
		}
		return fmt.Errorf("its log:\n%s", stderr)
	})
	if p := provider(); p != "second" {
		t.Fatalf("after a refused reload: %q", p)
	}
}
