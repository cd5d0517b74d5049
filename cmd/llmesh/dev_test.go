package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/llmesh/llmesh/sim/harness"
	"github.com/llmesh/llmesh/sim/harness/wait"
)

// devAgent is an `llmesh agent -dev` the test started with TMPDIR set.
type devAgent struct {
	cmd    *exec.Cmd
	base   string   // http://ADDR
	lines  []string // its output (logs and banner) up to the banner's end
	output *os.File
}

// startDevAgent runs `agent -dev -http addr` with TMPDIR=tmp, its logs
// and banner on one stream as a terminal shows them, and returns once
// the banner is printed.
func startDevAgent(t *testing.T, tmp, addr string) *devAgent {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	a := &devAgent{cmd: exec.Command(binary, "agent", "-dev", "-http", addr), output: r}
	a.cmd.Env = append(os.Environ(), "TMPDIR="+tmp)
	a.cmd.Stdout, a.cmd.Stderr = w, w
	if err := a.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	t.Cleanup(func() {
		if a.cmd.ProcessState == nil {
			_ = a.cmd.Process.Kill()
			_ = a.cmd.Wait()
		}
		r.Close()
	})
	done := make(chan error, 1)
	go func() {
		br := bufio.NewReader(r)
		for {
			line, err := br.ReadString('\n')
			a.lines = append(a.lines, strings.TrimRight(line, "\n"))
			if err != nil {
				done <- err
				return
			}
			if strings.HasPrefix(line, "  llmesh budgets") {
				done <- nil
				go func() { _, _ = io.Copy(io.Discard, br) }()
				return
			}
		}
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("agent -dev ended before its banner (%v):\n%s", err, strings.Join(a.lines, "\n"))
		}
	case <-time.After(60 * time.Second):
		t.Fatal("no banner from agent -dev within 60s")
	}
	m := regexp.MustCompile(`ready on (http://\S+)`).FindStringSubmatch(strings.Join(a.lines, "\n"))
	if m == nil {
		t.Fatalf("no address in the banner:\n%s", strings.Join(a.lines, "\n"))
	}
	a.base = m[1]
	return a
}

// stop stops the agent as Ctrl-C does and waits for it to exit.
func (a *devAgent) stop(t *testing.T) {
	t.Helper()
	if err := a.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if err := a.cmd.Wait(); err != nil {
		t.Fatalf("agent -dev exited with %v", err)
	}
}

// loopbackAddr is a loopback address with a port no one listens on now.
func loopbackAddr(t *testing.T) string {
	t.Helper()
	addr, err := freeAddr()
	if err != nil {
		t.Fatal(err)
	}
	return addr
}

// readmeCurl sends the README's request to base with the key the README
// reads from keyFile, and returns the answer's status.
func readmeCurl(t *testing.T, base, keyFile string) int {
	t.Helper()
	key, err := os.ReadFile(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodPost, base+"/v1/chat/completions",
		strings.NewReader(`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"Hello"}]}`))
	req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(key)))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// Two dev agents on different ports each keep a key file of their own, so
// each one's README curl works; one restarted keeps its key.
func TestAgentDevTwoPortsAndRestart(t *testing.T) {
	tmp := t.TempDir()
	addrA, addrB := loopbackAddr(t), loopbackAddr(t)
	a := startDevAgent(t, tmp, addrA)
	b := startDevAgent(t, tmp, addrB)
	_, portA, _ := net.SplitHostPort(addrA)
	_, portB, _ := net.SplitHostPort(addrB)
	fileA, fileB := filepath.Join(tmp, "llmesh-dev-"+portA+".key"), filepath.Join(tmp, "llmesh-dev-"+portB+".key")
	for _, c := range []struct{ base, file string }{{a.base, fileA}, {b.base, fileB}} {
		if got := readmeCurl(t, c.base, c.file); got != 200 {
			t.Fatalf("%s with the key in %s answered %d", c.base, c.file, got)
		}
	}
	keyA, _ := os.ReadFile(fileA)
	keyB, _ := os.ReadFile(fileB)
	if string(keyA) == string(keyB) {
		t.Fatal("two dev agents share a key")
	}
	if fi, err := os.Stat(fileA); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file %s: %v %v", fileA, fi.Mode(), err)
	}
	if !strings.Contains(strings.Join(a.lines, "\n"), strings.TrimSpace(string(keyA))) ||
		!strings.Contains(strings.Join(a.lines, "\n"), fileA) {
		t.Fatalf("the banner names neither the key nor its file:\n%s", strings.Join(a.lines, "\n"))
	}
	a.stop(t)
	a = startDevAgent(t, tmp, addrA)
	if again, _ := os.ReadFile(fileA); string(again) != string(keyA) {
		t.Fatalf("restarted, the key changed: %q then %q", keyA, again)
	}
	if got := readmeCurl(t, a.base, fileA); got != 200 {
		t.Fatalf("restarted, the README curl answered %d", got)
	}
	if got := readmeCurl(t, b.base, fileB); got != 200 {
		t.Fatalf("after the other restarted, the README curl answered %d", got)
	}
	a.stop(t)
	b.stop(t)
}

// A dev agent's start is quiet: its first 30 lines (logs and banner) hold
// no WARN from a single node's election, and name the dashboard and the
// operator verbs with the address to give them.
func TestAgentDevQuietBanner(t *testing.T) {
	tmp := t.TempDir()
	addr := loopbackAddr(t)
	a := startDevAgent(t, tmp, addr)
	first := a.lines[:min(30, len(a.lines))]
	text := strings.Join(first, "\n")
	if strings.Contains(text, "WARN") {
		t.Fatalf("a WARN in the first 30 lines:\n%s", text)
	}
	for _, want := range []string{"http://" + addr + "/ui/", "http://" + addr + "/v1", "llmesh status -addr http://" + addr,
		"llmesh providers -addr http://" + addr} {
		if !strings.Contains(text, want) {
			t.Fatalf("the first 30 lines lack %q:\n%s", want, text)
		}
	}
	a.stop(t)
}

// stopDemo stops `llmesh demo` with SIGINT, as Ctrl-C does, and checks it
// exits within 30s quiet from start to stop: the nodes' elections and
// their closing connections are not warnings, and it says it stopped.
func stopDemo(t *testing.T, cmd *exec.Cmd, out *bufio.Reader, stderr *bytes.Buffer) {
	t.Helper()
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	exited, rest := make(chan error, 1), make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(out)
		rest <- b
		exited <- cmd.Wait()
	}()
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("demo exited with %v\n%s", err, stderr)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the demo did not exit within 30s of SIGINT")
	}
	if tail := <-rest; !strings.Contains(string(tail), "llmesh demo: stopped") {
		t.Errorf("no stopped line after the drain:\n%s", tail)
	}
	if e := stderr.String(); strings.Contains(e, "level=WARN") || strings.Contains(e, "level=ERROR") {
		t.Errorf("the demo logged warnings or errors:\n%s", e)
	}
}

// A fresh dev agent answers requests sent while it starts (its one-voter
// ledger not yet elected, its escrow and shares not yet granted) 200, or
// 503 admission_timeout once one waited limits.admission_wait: the
// mesh's own slowness is never a 429, which says a configured limit was
// reached.
func TestAgentDevFreshNeverAnswers429(t *testing.T) {
	tmp, addr := t.TempDir(), loopbackAddr(t)
	_, port, _ := net.SplitHostPort(addr)
	const key = "sk-llmesh-dev-0123456789abcdef0123456789abcdef"
	if err := harness.WriteDevKey(filepath.Join(tmp, "llmesh-dev-"+port+".key"), key); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	codes := map[string]int{}
	stop := make(chan struct{})
	var clients sync.WaitGroup
	for range 4 {
		clients.Go(func() {
			client := &http.Client{Timeout: 10 * time.Second}
			for {
				select {
				case <-stop:
					return
				default:
				}
				req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/v1/chat/completions",
					strings.NewReader(`{"model":"gpt-4o-mini","max_tokens":5,"messages":[{"role":"user","content":"Hello"}]}`))
				req.Header.Set("Authorization", "Bearer "+key)
				resp, err := client.Do(req)
				if err != nil { // not listening yet
					time.Sleep(5 * time.Millisecond) // a client's pause before it tries again
					continue
				}
				var doc struct{ Error struct{ Code string } }
				_ = json.NewDecoder(resp.Body).Decode(&doc)
				resp.Body.Close()
				mu.Lock()
				codes[fmt.Sprintf("%d %s", resp.StatusCode, doc.Error.Code)]++
				mu.Unlock()
			}
		})
	}
	a := startDevAgent(t, tmp, addr)
	wait.Every(20*time.Millisecond).For(t, 30*time.Second, "20 answers 200", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return codes["200 "] >= 20
	})
	close(stop)
	clients.Wait()
	t.Logf("answers while the dev agent started: %v", codes)
	for c, n := range codes {
		if c != "200 " && c != "503 admission_timeout" {
			t.Errorf("%d requests answered %s", n, c)
		}
	}
	a.stop(t)
}
