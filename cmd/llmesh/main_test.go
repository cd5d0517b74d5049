package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/llmesh/llmesh/sim/harness/wait"
)

var binary string

// TestMain builds the real binary once: these tests run it as operators
// and the README do.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "llmesh-bin-*")
	if err != nil {
		panic(err)
	}
	binary = filepath.Join(dir, "llmesh")
	if out, err := exec.Command("go", "build", "-o", binary, ".").CombinedOutput(); err != nil {
		os.Stderr.Write(out)
		panic(err)
	}
	// The run fails if a goroutine the tests started outlives them.
	code := wait.NoLeaks(m)
	os.RemoveAll(dir)
	os.Exit(code)
}

// started runs the binary until the test ends and returns a reader of its
// standard output.
func started(t *testing.T, args ...string) (*exec.Cmd, *bufio.Reader, *bytes.Buffer) {
	t.Helper()
	cmd := exec.Command(binary, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	return cmd, bufio.NewReader(out), &stderr
}

// waitLine reads lines until one matches re, within a deadline.
func waitLine(t *testing.T, r *bufio.Reader, re *regexp.Regexp) []string {
	t.Helper()
	found := make(chan []string, 1)
	go func() {
		for {
			line, err := r.ReadString('\n')
			if m := re.FindStringSubmatch(line); m != nil {
				found <- m
				_, _ = io.Copy(io.Discard, r)
				return
			}
			if err != nil {
				close(found)
				return
			}
		}
	}()
	select {
	case m, ok := <-found:
		if !ok {
			t.Fatalf("output ended before a line matching %s", re)
		}
		return m
	case <-time.After(30 * time.Second):
		t.Fatalf("no line matching %s within 30s", re)
	}
	return nil
}

// TestAgentDev runs `llmesh agent -dev` as the README does, sends the
// printed request, and stops the agent with SIGTERM.
func TestAgentDev(t *testing.T) {
	cmd, out, stderr := started(t, "agent", "-dev", "-http", "127.0.0.1:0")
	m := waitLine(t, out, regexp.MustCompile(`key file: +(\S+)`))
	base := "http://127.0.0.1:" + regexp.MustCompile(`llmesh-dev-(\d+)\.key$`).FindStringSubmatch(m[1])[1]
	key, err := os.ReadFile(m[1])
	if err != nil {
		t.Fatal(err)
	}
	// The dev tenant's first gpt-4o request may cost more than the
	// escrow fetched ahead of it: it waits for the top-up, it is not
	// refused.
	req, _ := http.NewRequest(http.MethodPost, base+"/v1/chat/completions",
		strings.NewReader(`{"model":"gpt-4o","messages":[{"role":"user","content":"Hello"}]}`))
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(key)))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("the first gpt-4o request answered %d (Retry-After %q)", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	req, _ = http.NewRequest(http.MethodPost, base+"/v1/chat/completions",
		strings.NewReader(`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"Hello"}]}`))
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(key)))
	req.Header.Set("Content-Type", "application/json")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Choices []struct{ Message struct{ Content string } }
		Usage   struct {
			TotalTokens int `json:"total_tokens"`
		}
	}
	if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil || resp.StatusCode != 200 {
		t.Fatalf("status %d: %v", resp.StatusCode, err)
	}
	resp.Body.Close()
	if len(doc.Choices) != 1 || doc.Choices[0].Message.Content == "" || doc.Usage.TotalTokens == 0 {
		t.Fatalf("answer %+v", doc)
	}
	if p := resp.Header.Get("X-LLMesh-Provider"); p != "openai-us" && p != "azure-eu" {
		t.Fatalf("served by %q", p)
	}
	// Residency is honoured in dev too: llama-3-8b is cheapest on the EU
	// GPU cluster this region reaches.
	req, _ = http.NewRequest(http.MethodPost, base+"/v1/chat/completions",
		strings.NewReader(`{"model":"llama-3-8b","messages":[{"role":"user","content":"Hello"}]}`))
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(key)))
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if p := resp.Header.Get("X-LLMesh-Provider"); resp.StatusCode != 200 || p != "gpu-eu" {
		t.Fatalf("llama-3-8b: %d from %q", resp.StatusCode, p)
	}
	// The dev tenant has a budget in the dev node's own Raft ledger, and
	// what the two requests cost is settled there.
	wait.Every(50*time.Millisecond).Until(t, 10*time.Second, "budgets after two requests", func() error {
		out, err := exec.Command(binary, "budgets", "-addr", base, "-json").CombinedOutput()
		var doc struct {
			Consistency string
			Budgets     []struct {
				Tenant     string
				LimitUSD   float64 `json:"limit_usd"`
				SettledUSD float64 `json:"settled_usd"`
			}
		}
		if err == nil && json.Unmarshal(out, &doc) == nil && len(doc.Budgets) == 1 && doc.Budgets[0].SettledUSD > 0 {
			if b := doc.Budgets[0]; b.Tenant != "dev" || b.LimitUSD != 5 || doc.Consistency != "linearizable" {
				t.Fatalf("budgets: %s", out)
			}
			return nil
		}
		return fmt.Errorf("%v:\n%s", err, out)
	})
	if out, err := exec.Command(binary, "budgets", "-addr", base).CombinedOutput(); err != nil || !strings.Contains(string(out), "$5.000000") {
		t.Fatalf("budgets table: %v\n%s", err, out)
	}
	if out, err := exec.Command(binary, "raft", "peers", "-addr", base).CombinedOutput(); err != nil || !strings.Contains(string(out), "leader") {
		t.Fatalf("raft peers: %v\n%s", err, out)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("agent exited with %v\n%s", err, stderr)
	}
	if strings.Contains(stderr.String(), string(key)) {
		t.Fatal("the agent logged the tenant key")
	}
}

// TestAgentBadConfig fails at start with a message naming the field.
func TestAgentBadConfig(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "llmesh.yaml")
	if err := os.WriteFile(path, []byte(`
node: {name: n1, region: eu-west, data_dir: /tmp/x, htp: "127.0.0.1:0"}
regions: [{name: eu-west, jurisdiction: eu}]
`), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(binary, "agent", "-config", path).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "node.htp: unknown field (line 2)") {
		t.Fatalf("err %v, output:\n%s", err, out)
	}
	os.WriteFile(path, []byte(`
node: {name: n1, region: eu-west, data_dir: /tmp/x, http: "127.0.0.1:0"}
regions: [{name: eu-west, jurisdiction: eu}]
providers:
  - {name: p, region: eu-west, base_url: "http://127.0.0.1:1", api_key_env: LLMESH_TEST_UNSET_KEY, models: [{name: m}]}
`), 0o600)
	out, err = exec.Command(binary, "agent", "-config", path).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "providers[0].api_key_env: environment variable LLMESH_TEST_UNSET_KEY is empty or unset") {
		t.Fatalf("err %v, output:\n%s", err, out)
	}
	if out, err := exec.Command(binary, "agent").CombinedOutput(); err == nil || !strings.Contains(string(out), "-dev or -config") {
		t.Fatalf("no mode: %v %s", err, out)
	}
}

// TestEmulate runs the standalone emulator and asks it for a completion.
func TestEmulate(t *testing.T) {
	cmd, out, stderr := started(t, "emulate", "-listen", "127.0.0.1:0", "-ttft", "10ms", "-tps", "500", "-rpm", "100")
	m := waitLine(t, out, regexp.MustCompile(`serving .* on (http://127\.0\.0\.1:\d+)`))
	resp, err := http.Post(m[1]+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"x","stream":true,"messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.HasSuffix(string(body), "data: [DONE]\n\n") || resp.Header.Get("X-Ratelimit-Limit-Requests") != "100" {
		t.Fatalf("%d %v\n%s", resp.StatusCode, resp.Header, body)
	}
	cmd.Process.Signal(syscall.SIGINT)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("emulate exited with %v\n%s", err, stderr)
	}
}

// TestSim runs a scenario through the binary twice: the table names every
// policy, the charts are written, and the JSON is the same both times; a
// bad scenario is refused with the field named.
func TestSim(t *testing.T) {
	dir := t.TempDir()
	args := []string{"sim", "-scenario", "../../sim/scenarios/eu-outage-strict.yaml", "-duration", "30m"}
	out, err := exec.Command(binary, append(args, "-svg", dir)...).CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, p := range []string{"round-robin", "cheapest-first", "latency-first", "llmesh", "residency violations"} {
		if !strings.Contains(string(out), p) {
			t.Fatalf("no %q in:\n%s", p, out)
		}
	}
	for _, f := range []string{"latency-cdf.svg", "cost-over-time.svg", "load-by-region.svg"} {
		if b, err := os.ReadFile(filepath.Join(dir, f)); err != nil || !strings.HasPrefix(string(b), "<svg") {
			t.Fatalf("%s: %v", f, err)
		}
	}
	a, err1 := exec.Command(binary, append(args, "-json")...).Output()
	b, err2 := exec.Command(binary, append(args, "-json")...).Output()
	if err1 != nil || err2 != nil || string(a) != string(b) || !strings.Contains(string(a), `"residency_violations": 0`) {
		t.Fatalf("two runs: %v %v, equal %v", err1, err2, string(a) == string(b))
	}
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(bad, []byte("name: x\nduration: 1h\nregions: [{name: r, jurisdiction: eu}]\nprovders: []\n"), 0o600)
	if out, err := exec.Command(binary, "sim", "-scenario", bad).CombinedOutput(); err == nil || !strings.Contains(string(out), "provders") {
		t.Fatalf("bad scenario: %v %s", err, out)
	}
}
