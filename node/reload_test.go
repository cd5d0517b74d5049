package node_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/llmesh/llmesh/node"
)

// A reload swaps providers and prices under traffic: a stream under way
// finishes with the provider it planned; new requests follow the new
// prices; a changed node section is refused with the field named, and the
// node keeps what it had.
func TestReloadProvidersAndPrices(t *testing.T) {
	f := startNode(t, []upstream{
		{name: "cheap", kind: "openai", in: 1, out: 1},
		{name: "dear", kind: "openai", in: 5, out: 5},
	}, nil)
	served := func() string {
		resp := f.post(`{"model":"gpt-4o-mini","max_tokens":3,"messages":[{"role":"user","content":"hi"}]}`)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("status %d", resp.StatusCode)
		}
		return resp.Header.Get("X-Llmesh-Provider")
	}
	if p := served(); p != "cheap" {
		t.Fatalf("before the reload: %s", p)
	}
	// A stream that started before the reload.
	stream := f.post(`{"model":"gpt-4o-mini","stream":true,"max_tokens":30,"messages":[{"role":"user","content":"hi"}]}`)
	defer stream.Body.Close()

	next := *f.cfg
	next.Providers = append([]node.ProviderSection(nil), f.cfg.Providers...)
	next.Providers[0].Models = append([]node.ModelSection(nil), next.Providers[0].Models...)
	next.Providers[0].Models[0].InputUSDPerMTok, next.Providers[0].Models[0].OutputUSDPerMTok = 9, 9 // cheap is dear now
	if err := f.node.Reload(&next); err != nil {
		t.Fatal(err)
	}
	if p := served(); p != "dear" {
		t.Fatalf("after the reload the cheaper provider is dear, but %s answered", p)
	}
	if b := readAll(t, stream.Body); !strings.Contains(b, "[DONE]") || stream.Header.Get("X-Llmesh-Provider") != "cheap" {
		t.Fatalf("the stream under way: provider %q, body %q", stream.Header.Get("X-Llmesh-Provider"), b)
	}

	bad := next
	bad.Node.Region = "us-east"
	err := f.node.Reload(&bad)
	if err == nil || !strings.Contains(err.Error(), "node.region changed: restart the node") {
		t.Fatalf("a changed region: %v", err)
	}
	broken := next
	broken.Providers = append([]node.ProviderSection(nil), next.Providers...)
	broken.Providers[1].Kind = "bogus"
	if err := f.node.Reload(&broken); err == nil || !strings.Contains(err.Error(), "providers[1].kind") {
		t.Fatalf("an invalid provider: %v", err)
	}
	if p := served(); p != "dear" {
		t.Fatalf("after refused reloads the node changed its catalog: %s answered", p)
	}
}
