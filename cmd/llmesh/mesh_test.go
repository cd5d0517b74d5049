package main

import (
	"bufio"
	"encoding/json"
	"fmt"
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

// agentProc is an agent process started from a configuration file.
type agentProc struct {
	cmd  *exec.Cmd
	http string
}

// startAgent writes cfg and runs `llmesh agent -config`, returning once
// the node logs its HTTP address.
func startAgent(t *testing.T, name, cfg string, env ...string) *agentProc {
	t.Helper()
	path := filepath.Join(t.TempDir(), name+".yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(binary, "agent", "-config", path)
	cmd.Env = append(os.Environ(), env...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
		}
	})
	m := waitLine(t, bufio.NewReader(stderr), regexp.MustCompile(`msg="node started".* http=(\S+)`))
	return &agentProc{cmd: cmd, http: "http://" + m[1]}
}

// runCLI runs the binary to completion and returns its output.
func runCLI(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command(binary, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("llmesh %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// TestOperatorVerbsOnAMesh runs three agent processes sharing an
// encryption key made by `llmesh keygen`, joins them by configuration and
// by `llmesh join`, and reads them back with `llmesh members` and
// `llmesh providers`.
func TestOperatorVerbsOnAMesh(t *testing.T) {
	e := harness.StartEmulator(t, emulator.DefaultConfig())
	key := strings.TrimSpace(runCLI(t, "keygen"))
	if len(key) != 44 {
		t.Fatalf("keygen printed %q", key)
	}
	keyFile := filepath.Join(t.TempDir(), "gossip.key")
	os.WriteFile(keyFile, []byte(key+"\n"), 0o600)
	config := func(name, region, join string) string {
		return fmt.Sprintf(`
node:
  name: %s
  region: %s
  data_dir: %s
  http: 127.0.0.1:0
  gossip: 127.0.0.1:0
  gossip_key_file: %s
  cluster: test
  join: [%s]
regions: [{name: eu-west, jurisdiction: eu}, {name: us-east, jurisdiction: us}]
providers:
  - {name: emu, region: eu-west, base_url: %q, models: [{name: m, input_usd_per_mtok: 1}]}
probes: {disabled: true}
`, name, region, t.TempDir(), keyFile, join, e.URL())
	}
	a := startAgent(t, "a", config("a", "eu-west", ""))
	var members []struct {
		Name, Region, Address, State string
		RTT                          float64 `json:"rtt_ms"`
	}
	decode := func(out string) {
		var doc struct {
			Members *[]struct {
				Name, Region, Address, State string
				RTT                          float64 `json:"rtt_ms"`
			}
		}
		doc.Members = &members
		if err := json.Unmarshal([]byte(out), &doc); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
	}
	decode(runCLI(t, "members", "-addr", a.http, "-json"))
	gossipA := members[0].Address
	b := startAgent(t, "b", config("b", "us-east", gossipA))
	c := startAgent(t, "c", config("c", "us-east", ""))
	out := runCLI(t, "join", "-addr", c.http, gossipA)
	if !strings.Contains(out, "contacted 1 of 1") {
		t.Fatalf("join: %s", out)
	}
	wait.Every(50*time.Millisecond).Until(t, 20*time.Second, "b to see three members alive", func() error {
		decode(runCLI(t, "members", "-addr", b.http, "-json"))
		alive := 0
		for _, m := range members {
			if m.State == "alive" {
				alive++
			}
		}
		if alive == 3 {
			return nil
		}
		return fmt.Errorf("members seen by b: %+v", members)
	})
	table := runCLI(t, "members", "-addr", b.http)
	for _, want := range []string{"NAME", "REGION", "RTT", "a ", "eu-west", "c ", "us-east", "alive", "(self)"} {
		if !strings.Contains(table, want) {
			t.Fatalf("members table lacks %q:\n%s", want, table)
		}
	}
	if out := runCLI(t, "providers", "-addr", c.http); !strings.Contains(out, "emu") || !strings.Contains(out, "(as seen by c)") {
		t.Fatalf("providers:\n%s", out)
	}
	// A wrong address is a clear error, not a hang.
	if out, err := exec.Command(binary, "members", "-addr", "http://127.0.0.1:1").CombinedOutput(); err == nil || !strings.Contains(string(out), "llmesh members:") {
		t.Fatalf("bad address: %v %s", err, out)
	}
}

// A malformed gossip key stops start-up with a message naming the field,
// and the key itself is never printed.
func TestBadGossipKey(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bad.yaml")
	os.WriteFile(path, []byte(`
node: {name: n1, region: eu-west, data_dir: /tmp/x, http: "127.0.0.1:0", gossip: "127.0.0.1:0", gossip_key_env: LLMESH_TEST_GOSSIP_KEY}
regions: [{name: eu-west, jurisdiction: eu}]
`), 0o600)
	cmd := exec.Command(binary, "agent", "-config", path)
	cmd.Env = append(os.Environ(), "LLMESH_TEST_GOSSIP_KEY=c2hvcnQta2V5LXN1cGVyLXNlY3JldA==")
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "node.gossip_key_env: the key must be 32 bytes once decoded, not 22") {
		t.Fatalf("%v\n%s", err, out)
	}
	if strings.Contains(string(out), "c2hvcnQta2V5") || strings.Contains(string(out), "short-key-super-secret") {
		t.Fatalf("the key was printed:\n%s", out)
	}
}
