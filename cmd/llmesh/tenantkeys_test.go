package main

import (
	"bytes"
	"encoding/json"
	"net/http"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/llmesh/llmesh/sim/harness/wait"
)

// A key's settings and a tenant's limits as an operator changes them
// against llmesh agent -dev: the key named and allowed one model (other
// models refused 403), limited to 2 requests a minute (the third
// refused 429 naming it), shown by `tenants keys list` as a table and as
// JSON; the tenant's limits set, shown and cleared.
func TestTenantKeysVerbs(t *testing.T) {
	_, out, _ := started(t, "agent", "-dev", "-http", "127.0.0.1:0")
	base := waitLine(t, out, regexp.MustCompile(`ready on (http://127\.0\.0\.1:\d+)`))[1]
	cli := func(args ...string) string {
		t.Helper()
		var so, se bytes.Buffer
		n := 1 // the verb's words, then -addr
		if args[0] == "keys" {
			n = 2
		}
		c := exec.Command(binary, append(append(append([]string{"tenants"}, args[:n]...), "-addr", base), args[n:]...)...)
		c.Stdout, c.Stderr = &so, &se
		if err := c.Run(); err != nil {
			t.Fatalf("llmesh tenants %s: %v\n%s%s", strings.Join(args, " "), err, so.String(), se.String())
		}
		return so.String()
	}
	post := func(key, model string) (int, string) {
		req, _ := http.NewRequest(http.MethodPost, base+"/v1/chat/completions",
			strings.NewReader(`{"model":"`+model+`","max_tokens":4,"messages":[{"role":"user","content":"Hello"}]}`))
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var b bytes.Buffer
		_, _ = b.ReadFrom(resp.Body)
		return resp.StatusCode, b.String()
	}
	var added struct {
		Key   string `json:"key"`
		KeyID string `json:"key_id"`
	}
	if err := json.Unmarshal([]byte(cli("add", "-json", "acme")), &added); err != nil {
		t.Fatal(err)
	}
	wait.Every(20*time.Millisecond).For(t, 3*time.Second, "the new key to be taken", func() bool { code, _ := post(added.Key, "gpt-4o-mini"); return code == 200 })

	// Flags after the tenant and key, as an operator types them.
	cli("keys", "set", "acme", added.KeyID, "-name", "app", "-models", "gpt-4o-mini", "-rpm", "2")
	wait.Every(20*time.Millisecond).For(t, 3*time.Second, "gpt-4o to be refused to the key", func() bool {
		code, body := post(added.Key, "gpt-4o")
		return code == 403 && strings.Contains(body, "model_not_allowed")
	})
	list := cli("keys", "list", "acme")
	if !regexp.MustCompile(`(?m)^` + added.KeyID + `\s+app\s+gpt-4o-mini\s+2\s+-\s+-\s+live$`).MatchString(list) {
		t.Fatalf("tenants keys list:\n%s", list)
	}
	var doc struct {
		KeySettings []struct {
			ID, Name string
			Models   []string
		} `json:"key_settings"`
	}
	if err := json.Unmarshal([]byte(cli("keys", "list", "acme", "-json")), &doc); err != nil || len(doc.KeySettings) != 1 || doc.KeySettings[0].Name != "app" {
		t.Fatalf("tenants keys list -json: %v %+v", err, doc)
	}
	// The key's third request within the minute: 429 naming the key by
	// its name, never the key.
	codes := []int{}
	var last string
	for range 3 {
		code, body := post(added.Key, "gpt-4o-mini")
		codes, last = append(codes, code), body
	}
	if codes[len(codes)-1] != 429 || !strings.Contains(last, `key \"app\" of tenant acme is at its limit of 2 requests a minute`) || strings.Contains(last, added.Key) {
		t.Fatalf("codes %v, last %s", codes, last)
	}

	cli("limits", "acme", "-rpm", "100", "-tpm", "50000")
	if got := cli("limits", "acme"); !strings.Contains(got, "100 requests and 50000 tokens a minute") {
		t.Fatalf("tenants limits:\n%s", got)
	}
	cli("limits", "acme", "-clear")
	if got := cli("limits", "acme"); !strings.Contains(got, "no limit") {
		t.Fatalf("after -clear:\n%s", got)
	}
	cli("keys", "set", "acme", "app", "-models", "", "-rpm", "0")
	if list := cli("keys", "list", "acme"); !strings.Contains(list, "(all)") {
		t.Fatalf("after clearing:\n%s", list)
	}
}
