package node_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/llmesh/llmesh/node"
	"github.com/llmesh/llmesh/node/views"
	pb "github.com/llmesh/llmesh/proto"
)

// verdict is what one entry answered a request: its status, and the
// OpenAI error's code and message when it was refused.
type verdict struct {
	Status        int
	Code, Message string
}

// errorVerdict reads an OpenAI error document.
func errorVerdict(t *testing.T, status int, body []byte) verdict {
	t.Helper()
	if status == http.StatusOK {
		return verdict{Status: status}
	}
	var doc struct {
		Error struct{ Code, Message string }
	}
	if err := json.Unmarshal(body, &doc); err != nil {
		t.Fatalf("%d: not OpenAI's error shape: %v: %s", status, err, body)
	}
	return verdict{status, doc.Error.Code, doc.Error.Message}
}

// pipelineCase is one request, as a client or a peer sends it.
type pipelineCase struct {
	name      string
	key       string // the client's key; tenant is the peer's name for it
	tenant    string
	residency string // X-LLMesh-Residency, and the forward's residency
	body      string
	want      verdict // Message: a part of the message
}

// Admission exists once: the same bad or narrowed request sent by a
// client to chat, by a peer as a forward over gRPC, and to explain gets
// the same answer from each. An entry that skipped a check would answer
// differently (or serve what the others refuse).
func TestPipelineAdmitsOnceForEveryEntry(t *testing.T) {
	f := startNode(t, []upstream{
		{name: "mini-us", kind: "openai", juris: []string{"us"}, models: []string{"gpt-4o-mini"}},
		{name: "big-eu", kind: "openai", juris: []string{"eu"}, models: []string{"gpt-4o"}},
	}, func(c *node.Config) {
		c.Node.RPC = "127.0.0.1:0"
		c.Limits.MaxMessages = 3
		c.Limits.MaxBodyBytes = 4 << 10
		c.Tenants = append(c.Tenants, node.TenantSection{Name: "acme-eu", KeySHA256: []string{sha(euKey)}, Residency: "eu"})
	})
	mesh := meshClient(t, f)

	msg := `{"role":"user","content":"hi"}`
	chat := func(model string, msgs int) string {
		return `{"model":"` + model + `","max_tokens":4,"messages":[` + strings.TrimSuffix(strings.Repeat(msg+",", msgs), ",") + `]}`
	}
	t1 := func(c pipelineCase) pipelineCase { c.key, c.tenant = testKey, "t1"; return c }
	eu := func(c pipelineCase) pipelineCase { c.key, c.tenant = euKey, "acme-eu"; return c }
	for _, c := range []pipelineCase{
		t1(pipelineCase{name: "malformed body", body: `{"model":"gpt-4o-mini","messages":[`,
			want: verdict{400, "invalid_request", ""}}),
		t1(pipelineCase{name: "empty body", body: "", want: verdict{400, "invalid_request", "the request body is empty"}}),
		t1(pipelineCase{name: "body too large", body: chat("gpt-4o-mini", 1)[:40] + strings.Repeat("x", 8<<10) + `"}]}`,
			want: verdict{413, "request_too_large", "request body too large: this node takes at most 4096 bytes (limits.max_body_bytes)"}}),
		t1(pipelineCase{name: "too many messages", body: chat("gpt-4o-mini", 4),
			want: verdict{400, "invalid_request", "(limits.max_messages)"}}),
		t1(pipelineCase{name: "unknown model", body: chat("nope", 1), want: verdict{404, "model_not_found", ""}}),
		t1(pipelineCase{name: "unknown jurisdiction", residency: "jp", body: chat("gpt-4o-mini", 1),
			want: verdict{400, "invalid_request", `"jp" is not the jurisdiction of any region`}}),
		t1(pipelineCase{name: "not a jurisdiction name", residency: "e u!", body: chat("gpt-4o-mini", 1),
			want: verdict{400, "invalid_request", "is not a jurisdiction name"}}),
		t1(pipelineCase{name: "header narrows to eu", residency: "eu", body: chat("gpt-4o-mini", 1),
			want: verdict{503, "no_compliant_provider", ""}}),
		eu(pipelineCase{name: "header would widen the tenant's", residency: "us", body: chat("gpt-4o-mini", 1),
			want: verdict{400, "invalid_request", "would widen"}}),
		eu(pipelineCase{name: "tenant policy narrows to eu", body: chat("gpt-4o-mini", 1),
			want: verdict{503, "no_compliant_provider", ""}}),
		eu(pipelineCase{name: "narrowed, and served in eu", residency: "eu", body: chat("gpt-4o", 1), want: verdict{Status: 200}}),
	} {
		t.Run(c.name, func(t *testing.T) {
			got := map[string]verdict{
				"chat":    chatVerdict(t, f, c),
				"forward": forwardVerdict(t, mesh, c),
				"explain": explainVerdict(t, f, c),
			}
			for entry, v := range got {
				if v.Status != c.want.Status || v.Code != c.want.Code || !strings.Contains(v.Message, c.want.Message) {
					t.Errorf("%s answered %+v, want %+v", entry, v, c.want)
				}
				if v != got["chat"] {
					t.Errorf("%s answered %+v, chat %+v", entry, v, got["chat"])
				}
			}
		})
	}
	if n := f.emus["mini-us"].Stats().Requests; n != 0 {
		t.Fatalf("the us provider got %d requests", n)
	}
}

// meshClient calls f's node as a peer does, over its node.rpc listener.
func meshClient(t *testing.T, f *fixture) pb.MeshClient {
	t.Helper()
	cc, err := grpc.NewClient(f.node.RPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return pb.NewMeshClient(cc)
}

func chatVerdict(t *testing.T, f *fixture, c pipelineCase) verdict {
	t.Helper()
	resp := postAs(t, f.url, c.key, c.body, "X-LLMesh-Residency", c.residency)
	return errorVerdict(t, resp.StatusCode, []byte(readAll(t, resp.Body)))
}

func explainVerdict(t *testing.T, f *fixture, c pipelineCase) verdict {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, f.url+"/v1/route/explain", strings.NewReader(c.body))
	req.Header.Set("Authorization", "Bearer "+c.key)
	if c.residency != "" {
		req.Header.Set("X-LLMesh-Residency", c.residency)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body := []byte(readAll(t, resp.Body))
	if resp.StatusCode != http.StatusOK {
		return errorVerdict(t, resp.StatusCode, body)
	}
	var e views.Explanation
	if err := json.Unmarshal(body, &e); err != nil {
		t.Fatal(err)
	}
	if e.Error != nil {
		return verdict{e.Error.Status, e.Error.Code, e.Error.Message}
	}
	return verdict{Status: http.StatusOK}
}

// forwardVerdict sends c as a peer forwards a request: Mesh.Forward over
// gRPC, with the tenant's name and the residency it established.
func forwardVerdict(t *testing.T, mesh pb.MeshClient, c pipelineCase) verdict {
	t.Helper()
	st, err := mesh.Forward(context.Background(), &pb.ForwardRequest{Origin: "peer-1", RequestId: "pipeline-test",
		Tenant: c.tenant, Residency: c.residency, Body: []byte(c.body)})
	if err != nil {
		t.Fatal(err)
	}
	msg, err := st.Recv()
	if err != nil || msg.GetHead() == nil {
		t.Fatalf("no head: %v %v", msg, err)
	}
	status := int(msg.GetHead().Status)
	var body []byte
	for {
		msg, err := st.Recv()
		if err == io.EOF {
			t.Fatal("the answer ended without its trailer")
		}
		if err != nil {
			t.Fatal(err)
		}
		if d := msg.GetData(); d != nil {
			body = append(body, d...)
		}
		if tr := msg.GetTrailer(); tr != nil {
			v := errorVerdict(t, status, body)
			if tr.ErrorCode != v.Code {
				t.Errorf("the trailer's code %q, the body's %q", tr.ErrorCode, v.Code)
			}
			return v
		}
	}
}

// A peer's request with strict transit must come from a node this one
// places in the request's jurisdiction: from a node it cannot place, it
// is refused before anything is planned, and the sender tries elsewhere.
func TestPipelinePeerStrictTransit(t *testing.T) {
	f := startNode(t, []upstream{{name: "big-eu", kind: "openai", juris: []string{"eu"}}}, func(c *node.Config) {
		c.Node.RPC = "127.0.0.1:0"
		c.Tenants = append(c.Tenants, node.TenantSection{Name: "acme-eu", KeySHA256: []string{sha(euKey)}, Residency: "eu"})
	})
	st, err := meshClient(t, f).Forward(context.Background(), &pb.ForwardRequest{Origin: "peer-1", RequestId: "strict",
		Tenant: "acme-eu", StrictTransit: true, Body: []byte(hello)})
	if err != nil {
		t.Fatal(err)
	}
	var head *pb.Head
	var body []byte
	for {
		msg, err := st.Recv()
		if err != nil {
			t.Fatalf("no trailer: %v", err)
		}
		if h := msg.GetHead(); h != nil {
			head = h
		}
		body = append(body, msg.GetData()...)
		if tr := msg.GetTrailer(); tr != nil {
			if head == nil || head.Status != 503 || tr.ErrorCode != "no_compliant_provider" || !strings.Contains(string(body), "strict transit: the sending node peer-1") {
				t.Fatalf("head %v, trailer %v: %s", head, tr, body)
			}
			break
		}
	}
	if n := f.emus["big-eu"].Stats().Requests; n != 0 {
		t.Fatalf("the provider got %d requests", n)
	}
}

// A tenant at its concurrency bound on a node is refused there whether its
// request comes from a client or a peer, with the same answer; explain
// holds no place, so it still answers.
func TestPipelineTenantConcurrency(t *testing.T) {
	release := make(chan struct{})
	held := make(chan struct{}, 1)
	holding := hostile(t, func(w http.ResponseWriter, r *http.Request) {
		held <- struct{}{}
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"x","object":"chat.completion","created":1,"model":"slow-model","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`)
	})
	f := startNode(t, []upstream{{name: "p", kind: "openai"}}, func(c *node.Config) {
		c.Node.RPC = "127.0.0.1:0"
		c.Limits.MaxConcurrentPerTenant = 1
		c.Providers = append(c.Providers, node.ProviderSection{Name: "holding", Kind: "openai", Region: "eu-west", BaseURL: holding,
			Models: []node.ModelSection{{Name: "slow-model", InputUSDPerMTok: 1, OutputUSDPerMTok: 1}}})
	})
	done := make(chan int, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodPost, f.url+"/v1/chat/completions", strings.NewReader(`{"model":"slow-model","messages":[{"role":"user","content":"wait"}]}`))
		req.Header.Set("Authorization", "Bearer "+testKey)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			done <- 0
			return
		}
		_ = resp.Body.Close()
		done <- resp.StatusCode
	}()
	select {
	case <-held: // t1's one place is taken
	case code := <-done:
		t.Fatalf("the request meant to hold t1's place ended: %d", code)
	}
	c := pipelineCase{key: testKey, tenant: "t1", body: hello,
		want: verdict{429, "rate_limited", "(limits.max_concurrent_per_tenant)"}}
	chat, forward := chatVerdict(t, f, c), forwardVerdict(t, meshClient(t, f), c)
	for entry, v := range map[string]verdict{"chat": chat, "forward": forward} {
		if v.Status != c.want.Status || v.Code != c.want.Code || !strings.Contains(v.Message, c.want.Message) || v != chat {
			t.Errorf("%s answered %+v, want %+v (chat %+v)", entry, v, c.want, chat)
		}
	}
	if v := explainVerdict(t, f, c); v.Status != http.StatusOK {
		t.Errorf("explain at the bound: %+v", v)
	}
	close(release)
	if code := <-done; code != 200 {
		t.Fatalf("the held request: %d", code)
	}
}
