package node_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/llmesh/llmesh/node/views"
	"github.com/llmesh/llmesh/sim/emulator"
	"github.com/llmesh/llmesh/sim/harness/wait"
)

// An answer tells what its request was charged, all of it: when the
// cheaper provider accepts the request and breaks off its answer (its
// usage unknown, charged at its upper bound, since it may bill for it)
// and the next provider answers, X-LLMesh-Cost and usage.cost are the
// two charges together, which is what the ledger attributes to the
// request's tenant. (They said only the second, and spend by tag no
// longer added up to what the clients were told.)
func TestCostTellsEveryChargedAttempt(t *testing.T) {
	m := startMeshWith(t, 1, []upstream{{name: "cheap", kind: "openai", in: 1, out: 1}, {name: "dear", kind: "openai", in: 2, out: 2}},
		voters(t, 1, nil), fastRaft)
	if err := m.emus["cheap"].SetMode(emulator.ModeCut); err != nil {
		t.Fatal(err)
	}
	code, body, h := send(t, m.urls[0]+"/v1/chat/completions", testKey,
		`{"model":"gpt-4o-mini","max_tokens":8,"messages":[{"role":"user","content":"twice"}]}`)
	if code != 200 || h.Get("X-LLMesh-Provider") != "dear" {
		t.Fatalf("%d from %q: %s", code, h.Get("X-LLMesh-Provider"), body)
	}
	told := nanos(t, h.Get("X-LLMesh-Cost"))
	var v views.Spend
	wait.For(t, 10*time.Second, "both attempts' charges in the ledger", func() bool {
		getJSON(t, m.urls[0]+"/v1/mesh/spend?by=provider&since=1h", "", &v)
		return v.Requests == 2
	})
	if v.TotalNanos != told {
		t.Fatalf("X-LLMesh-Cost %d nano-dollars; the ledger charged the request %d (%+v)", told, v.TotalNanos, v.Rows)
	}
	var doc struct{ Usage json.RawMessage }
	if err := json.Unmarshal([]byte(body), &doc); err != nil {
		t.Fatal(err)
	}
	if c := usageCost(t, string(doc.Usage)); nanos(t, c) != told {
		t.Fatalf("usage.cost %s, X-LLMesh-Cost %s", c, h.Get("X-LLMesh-Cost"))
	}
}
