package node_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/llmesh/llmesh/node"
	"github.com/llmesh/llmesh/node/views"
	"github.com/llmesh/llmesh/sim/emulator"
	"github.com/llmesh/llmesh/sim/harness/wait"
)

// send posts body to url as key with the headers hdr (and
// anthropic-version), and returns the status, the body and the answer's
// headers.
func send(t *testing.T, url, key, body string, hdr ...string) (int, string, http.Header) {
	t.Helper()
	resp := postPath(t, url, key, body, append(hdr, "Anthropic-Version", "2023-06-01")...)
	return resp.StatusCode, readAll(t, resp.Body), resp.Header
}

// Spend is attributed where the provider is called: a request forwarded
// to eu-1 is charged there, under the tags the us node established (the
// forward carries them); GET /v1/mesh/spend answers it from any node,
// with a series for charts. Malformed tags are refused 400, naming the
// header or field, in the endpoint's error shape.
func TestSpendThroughAForward(t *testing.T) {
	euSum := sha256.Sum256([]byte(euKey))
	f := startRegions(t, regionsUpstreams(emulator.Config{}), func(_ string, c *node.Config) {
		c.Node.Voter, c.Node.BootstrapExpect, c.Node.Raft, c.Node.DataDir = true, 3, "127.0.0.1:0", t.TempDir()
		for i := range c.Tenants {
			if c.Tenants[i].Name == "acme-eu" {
				c.Tenants[i].Keys = append(c.Tenants[i].Keys, node.KeySection{Name: "eu-app", KeySHA256: hex.EncodeToString(euSum[:])})
			}
		}
	})
	us := f.urls["us"]
	costs := map[string]int64{}
	for _, tc := range []struct{ body, tags, set string }{
		{`{"model":"gpt-4o-mini","max_tokens":6,"messages":[{"role":"user","content":"un"}]}`, "team:eu, app:fwd", "app:fwd,team:eu"},
		{`{"model":"gpt-4o-mini","max_tokens":7,"stream":true,"metadata":{"tags":"team:eu"},"messages":[{"role":"user","content":"deux"}]}`, "", "team:eu"},
	} {
		code, body, h := send(t, us+"/v1/chat/completions", euKey, tc.body, "X-LLMesh-Tags", tc.tags)
		if code != 200 || h.Get("X-LLMesh-Via") != "eu-1" {
			t.Fatalf("%d via %q: %s", code, h.Get("X-LLMesh-Via"), body)
		}
		cost := h.Get("X-LLMesh-Cost")
		if m := costCommentRe.FindStringSubmatch(body); m != nil {
			cost = m[1]
		}
		costs[tc.set] += nanos(t, cost)
	}
	var v views.Spend
	wait.For(t, 15*time.Second, "eu-1's report of the forwarded requests", func() bool {
		if code := getJSON(t, us+"/v1/mesh/spend?by=tag&since=1h", "", &v); code != 200 {
			t.Fatalf("spend: %d", code)
		}
		return v.TotalNanos == costs["app:fwd,team:eu"]+costs["team:eu"]
	})
	got := map[string]int64{}
	for _, r := range v.Rows {
		got[r.Name] = r.Nanos
		if r.Tenant != "acme-eu" {
			t.Fatalf("row %+v", r)
		}
	}
	if len(got) != 2 || got["app:fwd,team:eu"] != costs["app:fwd,team:eu"] || got["team:eu"] != costs["team:eu"] ||
		v.Consistency != "linearizable" || v.Step != "hour" || len(v.Series) != 1 || v.Series[0].Nanos != v.TotalNanos {
		t.Fatalf("spend by tag %+v, want %v", v, costs)
	}
	// By key, the key is named as the ledger names it, never shown.
	if getJSON(t, us+"/v1/mesh/spend?by=key&since=1h", "", &v); len(v.Rows) != 1 || v.Rows[0].Label != "eu-app" ||
		v.Rows[0].Name != hex.EncodeToString(euSum[:])[:12] || v.Rows[0].Nanos != v.TotalNanos {
		t.Fatalf("spend by key: %+v", v.Rows)
	}
	// A stale read is us-1's own replica's, which catches up.
	wait.For(t, 5*time.Second, "us-1's replica to hold the spend", func() bool {
		getJSON(t, us+"/v1/mesh/spend?by=provider&tenant=acme-eu&consistency=stale", "", &v)
		return len(v.Rows) == 1 && v.Rows[0].Name == "gpu-eu" && v.Consistency == "stale" && v.Rows[0].Nanos == v.TotalNanos && v.TotalNanos > 0
	})
	for q, param := range map[string]string{"by=color": "by", "since=yesterday": "since", "since=-5m": "since"} {
		resp := mustGet(t, us+"/v1/mesh/spend?"+q)
		var e struct{ Error struct{ Param, Code string } }
		if err := json.NewDecoder(resp.Body).Decode(&e); err != nil || resp.StatusCode != 400 || e.Error.Param != param {
			t.Fatalf("%s: %d %+v %v", q, resp.StatusCode, e, err)
		}
	}

	// Tags a request may not carry, on the OpenAI endpoints and Messages.
	for _, tc := range []struct{ path, body, tags, param string }{
		{"/v1/chat/completions", `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"x"}]}`, "team a", "X-LLMesh-Tags"},
		{"/v1/chat/completions", `{"model":"gpt-4o-mini","messages":[{"role":"user","content":"x"}]}`, "a,b,c,d,e,f,g,h,i", "X-LLMesh-Tags"},
		{"/v1/embeddings", `{"model":"gpt-4o-mini","input":"x","metadata":{"tags":["a"]}}`, "", "metadata.tags"},
	} {
		code, body, _ := send(t, us+tc.path, euKey, tc.body, "X-LLMesh-Tags", tc.tags)
		var e struct{ Error struct{ Param, Code string } }
		if json.Unmarshal([]byte(body), &e); code != 400 || e.Error.Code != "invalid_request" || e.Error.Param != tc.param {
			t.Fatalf("%s with tags %q: %d %s", tc.path, tc.tags, code, body)
		}
	}
	code, body, _ := send(t, us+"/v1/messages", euKey, `{"model":"gpt-4o-mini","max_tokens":5,"messages":[{"role":"user","content":"x"}]}`,
		"X-LLMesh-Tags", "ok,not ok")
	if code != 400 || !strings.Contains(body, `"type":"invalid_request_error"`) || !strings.Contains(body, `"type":"error"`) || !strings.Contains(body, "X-LLMesh-Tags") {
		t.Fatalf("messages: %d %s", code, body)
	}
}
