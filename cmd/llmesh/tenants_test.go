package main

import (
	"bytes"
	"encoding/json"
	"net/http"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/llmesh/llmesh/sim/harness/wait"
)

// The tenant key lifecycle as an operator runs it against llmesh agent
// -dev: add a tenant (its key printed once), rotate its key (the old one
// refused, the new one taken), revoke every key; the list shows key ids,
// never keys, and the agent never logs a key.
func TestTenantKeyLifecycle(t *testing.T) {
	agent, out, stderr := started(t, "agent", "-dev", "-http", "127.0.0.1:0")
	base := waitLine(t, out, regexp.MustCompile(`ready on (http://127\.0\.0\.1:\d+)`))[1]
	cli := func(args ...string) string {
		t.Helper()
		var so, se bytes.Buffer
		c := exec.Command(binary, append(args[:1:1], append([]string{"-addr", base}, args[1:]...)...)...)
		if args[0] == "tenants" {
			c = exec.Command(binary, append(args[:2:2], append([]string{"-addr", base}, args[2:]...)...)...)
		}
		c.Stdout, c.Stderr = &so, &se
		if err := c.Run(); err != nil {
			t.Fatalf("llmesh %s: %v\n%s%s", strings.Join(args, " "), err, so.String(), se.String())
		}
		return so.String()
	}
	status := func(key string) int {
		req, _ := http.NewRequest(http.MethodPost, base+"/v1/chat/completions",
			strings.NewReader(`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"Hello"}]}`))
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	within := func(what string, cond func() bool) {
		t.Helper()
		wait.Every(20*time.Millisecond).For(t, 3*time.Second, what, cond)
	}
	keyRe := regexp.MustCompile(`\n  (sk-llmesh-[A-Za-z0-9_-]{43})\n`)

	var added struct {
		Key   string `json:"key"`
		KeyID string `json:"key_id"`
	}
	// -json prints the key too: for scripts that store it in a vault.
	if err := json.Unmarshal([]byte(cli("tenants", "add", "-residency", "eu", "-json", "acme")), &added); err != nil || !keyRe.MatchString("\n  "+added.Key+"\n") {
		t.Fatalf("tenants add -json: %v %+v", err, added)
	}
	first := added.Key
	within("the new key to be taken", func() bool { return status(first) == 200 })
	if list := cli("tenants", "list"); !strings.Contains(list, "acme") || !strings.Contains(list, added.KeyID) || strings.Contains(list, first) {
		t.Fatalf("tenants list:\n%s", list)
	}

	rotated := cli("tenants", "rotate", "acme")
	m := keyRe.FindStringSubmatch(rotated)
	if m == nil || !strings.Contains(rotated, "Revoked: "+added.KeyID) {
		t.Fatalf("tenants rotate:\n%s", rotated)
	}
	second := m[1]
	within("the rotated key to be taken and the old one refused", func() bool { return status(second) == 200 && status(first) == 401 })

	cli("tenants", "revoke", "-all", "acme")
	within("every key of acme to be refused", func() bool { return status(second) == 401 })
	if list := cli("tenants", "list", "-json"); strings.Contains(list, second) || !strings.Contains(list, `"keys": []`) {
		t.Fatalf("after revoking all:\n%s", list)
	}
	// The agent's log, read once it has exited (its writer runs until then).
	if err := agent.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := agent.Wait(); err != nil {
		t.Fatalf("agent: %v\n%s", err, stderr)
	}
	for _, k := range []string{first, second} {
		if strings.Contains(stderr.String(), k) {
			t.Fatal("the agent logged a tenant key")
		}
	}
}
