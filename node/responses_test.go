package node_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"

	"github.com/llmesh/llmesh/node"
	"github.com/llmesh/llmesh/node/audit"
	"github.com/llmesh/llmesh/node/views"
	"github.com/llmesh/llmesh/sim/emulator"
	"github.com/llmesh/llmesh/sim/harness/wait"
)

// responsesUpstreams are the regions' providers with the eu GPU cluster a
// vLLM (no Responses API: bridged) and gpt-4o served by the global
// providers alone (Responses passed through).
func responsesUpstreams() []upstream {
	ups := regionsUpstreams(emulator.Config{})
	for i := range ups {
		switch ups[i].name {
		case "gpu-eu", "gpu-ap":
			ups[i].kind = "vllm"
		default:
			ups[i].models = []string{"gpt-4o-mini", "gpt-4o"}
		}
	}
	return ups
}

func userText(s string) responses.ResponseNewParamsInputUnion {
	return responses.ResponseNewParamsInputUnion{OfString: openai.String(s)}
}

// newResponse creates a response, streaming and accumulating it or not,
// and returns it with the answer's headers.
func newResponse(t *testing.T, c openai.Client, p responses.ResponseNewParams, stream bool) (*responses.Response, http.Header) {
	t.Helper()
	var hdr *http.Response
	if !stream {
		r, err := c.Responses.New(context.Background(), p, option.WithResponseInto(&hdr))
		if apiErr := (*openai.Error)(nil); errors.As(err, &apiErr) {
			t.Fatalf("%d %s", apiErr.StatusCode, apiErr.RawJSON())
		} else if err != nil {
			t.Fatal(err)
		}
		return r, hdr.Header
	}
	st := c.Responses.NewStreaming(context.Background(), p, option.WithResponseInto(&hdr))
	var done *responses.Response
	var text strings.Builder
	for st.Next() {
		ev := st.Current()
		switch ev.Type {
		case "response.output_text.delta":
			text.WriteString(ev.Delta)
		case "response.completed", "response.incomplete":
			r := ev.Response
			done = &r
		}
	}
	if err := st.Err(); err != nil {
		t.Fatal(err)
	}
	if done == nil {
		t.Fatal("the stream ended without response.completed")
	}
	if got := done.OutputText(); got != text.String() {
		t.Fatalf("the deltas say %q, the completed response %q", text.String(), got)
	}
	return done, hdr.Header
}

// openai-go's Responses API through three nodes, an eu tenant entering at
// the us node: gpt-4o-mini is the eu vLLM cluster's, bridged to chat
// completions through eu-1 so that the client cannot tell; gpt-4o is
// Azure's in the eu, passed through. Whole, streamed, and follow-ups by
// previous_response_id entering at any node reach the provider (or node)
// holding the response; retrieve and delete too; every request charged
// and in the audit trail; another tenant sees none of it.
func TestResponsesAcrossTheMesh(t *testing.T) {
	dirs := map[string]string{}
	f := startRegions(t, responsesUpstreams(), func(region string, c *node.Config) {
		dirs[region] = t.TempDir()
		c.Audit = node.AuditSection{Dir: dirs[region]}
	})
	c := regionClient(f.urls["us"], euKey)
	for _, tc := range []struct {
		model, provider, via string
	}{{"gpt-4o", "azure-eu", "us-1"}, {"gpt-4o-mini", "gpu-eu", "eu-1"}} {
		for _, stream := range []bool{false, true} {
			first, hdr := newResponse(t, c, responses.ResponseNewParams{Model: tc.model, Input: userText("Bonjour"),
				Instructions: openai.String("Be brief."), MaxOutputTokens: openai.Int(20)}, stream)
			if p, via := hdr.Get("X-LLMesh-Provider"), hdr.Get("X-LLMesh-Via"); p != tc.provider || via != tc.via {
				t.Fatalf("%s stream %v: served by %q via %q", tc.model, stream, p, via)
			}
			if !strings.HasPrefix(first.ID, "resp_") || first.Model != tc.model || first.OutputText() == "" ||
				first.Usage.OutputTokens == 0 || first.Usage.InputTokens == 0 || first.Object != "response" {
				t.Fatalf("%s stream %v: %s", tc.model, stream, first.RawJSON())
			}
			// The follow-up enters at the ap node, which never saw the
			// first: it finds who holds it.
			ap := regionClient(f.urls["ap"], euKey)
			next, hdr := newResponse(t, ap, responses.ResponseNewParams{Model: tc.model, Input: userText("Et alors ?"),
				PreviousResponseID: openai.String(first.ID), MaxOutputTokens: openai.Int(20)}, stream)
			if p := hdr.Get("X-LLMesh-Provider"); p != tc.provider || next.OutputText() == "" {
				t.Fatalf("%s stream %v follow-up: served by %q: %s", tc.model, stream, p, next.RawJSON())
			}
			if next.Usage.InputTokens <= first.Usage.InputTokens {
				t.Errorf("%s stream %v: the follow-up read %d input tokens, the first %d: the context was lost",
					tc.model, stream, next.Usage.InputTokens, first.Usage.InputTokens)
			}
			got, err := ap.Responses.Get(context.Background(), first.ID, responses.ResponseGetParams{})
			if err != nil || got.ID != first.ID || got.OutputText() != first.OutputText() {
				t.Fatalf("%s stream %v: retrieve: %v %+v", tc.model, stream, err, got)
			}
		}
	}
	checkResponsesRefusals(t, f)
	checkResponsesCharged(t, f, dirs)
}

// checkResponsesRefusals: a response is its tenant's alone, a deleted
// one is gone, an unknown previous_response_id is 404 in OpenAI's shape,
// and a follow-up whose residency no longer allows the provider holding
// the response is refused, not sent elsewhere.
func checkResponsesRefusals(t *testing.T, f *regionsFixture) {
	t.Helper()
	ctx := context.Background()
	c := regionClient(f.urls["us"], euKey)
	r, _ := newResponse(t, c, responses.ResponseNewParams{Model: "gpt-4o", Input: userText("x")}, false)
	other := regionClient(f.urls["us"], usKey)
	var apiErr *openai.Error
	if _, err := other.Responses.Get(ctx, r.ID, responses.ResponseGetParams{}); !errors.As(err, &apiErr) || apiErr.StatusCode != 404 {
		t.Fatalf("another tenant's retrieve: %v", err)
	}
	// Explain shows a follow-up planned for the provider holding it alone.
	resp := postPath(t, f.urls["us"]+"/v1/route/explain?endpoint=responses", euKey,
		`{"model":"gpt-4o","input":"x","previous_response_id":"`+r.ID+`"}`)
	var plan views.Explanation
	if err := json.NewDecoder(resp.Body).Decode(&plan); err != nil || len(plan.Targets) != 1 || plan.Targets[0].Provider != "azure-eu" {
		t.Fatalf("explain: %v %+v", err, plan)
	}
	held := false
	for _, d := range plan.Dropped {
		held = held || strings.Contains(d.Reason, "previous_response_id "+r.ID+" is held by azure-eu")
	}
	if !held {
		t.Fatalf("explain's dropped providers %+v", plan.Dropped)
	}
	if err := c.Responses.Delete(ctx, r.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Responses.Get(ctx, r.ID, responses.ResponseGetParams{}); !errors.As(err, &apiErr) || apiErr.StatusCode != 404 {
		t.Fatalf("retrieve after delete: %v", err)
	}
	_, err := c.Responses.New(ctx, responses.ResponseNewParams{Model: "gpt-4o", Input: userText("x"), PreviousResponseID: openai.String("resp_unknown")})
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 404 || apiErr.Code != "previous_response_not_found" || apiErr.Param != "previous_response_id" {
		t.Fatalf("an unknown previous_response_id: %v", err)
	}
	// A tenant free to go anywhere makes a response in the us, then asks
	// for a follow-up that must stay in the eu.
	free := regionClient(f.urls["us"], testKey)
	us, hdr := newResponse(t, free, responses.ResponseNewParams{Model: "gpt-4o", Input: userText("x")}, false)
	if hdr.Get("X-LLMesh-Provider") != "openai-us" {
		t.Fatalf("the free tenant's gpt-4o went to %s", hdr.Get("X-LLMesh-Provider"))
	}
	before := f.requests()
	_, err = free.Responses.New(ctx, responses.ResponseNewParams{Model: "gpt-4o", Input: userText("x"), PreviousResponseID: openai.String(us.ID)},
		option.WithHeader("X-LLMesh-Residency", "eu"))
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 503 || apiErr.Code != "no_compliant_provider" || !strings.Contains(apiErr.Message, us.ID) {
		t.Fatalf("a follow-up outside the response's residency: %v", err)
	}
	if _, err := free.Responses.Get(ctx, us.ID, responses.ResponseGetParams{}, option.WithHeader("X-LLMesh-Residency", "eu")); !errors.As(err, &apiErr) || apiErr.StatusCode != 503 {
		t.Fatalf("a retrieve outside the response's residency: %v", err)
	}
	if after := f.requests(); after["openai-us"] != before["openai-us"] || after["azure-eu"] != before["azure-eu"] {
		t.Fatalf("a refused follow-up reached a provider: %v → %v", before, after)
	}
}

// checkResponsesCharged: every Responses request the eu tenant made is a
// decision with a cost and an eu provider, and in the audit trail of the
// node that admitted it with endpoint responses.
func checkResponsesCharged(t *testing.T, f *regionsFixture, dirs map[string]string) {
	t.Helper()
	var doc views.Decisions
	getJSON(t, f.urls["us"]+"/v1/mesh/decisions?limit=64", "", &doc)
	charged := 0
	for _, d := range doc.Decisions {
		if d.Tenant != "acme-eu" || d.Endpoint != "responses" || d.Status != 200 || d.CostUSD == 0 {
			continue
		}
		if d.Provider != "gpu-eu" && d.Provider != "azure-eu" {
			t.Fatalf("decision %+v: served outside the eu", d)
		}
		charged++
	}
	if charged < 5 {
		t.Fatalf("%d charged Responses decisions at us-1; want the 4 creates and the refusals' create", charged)
	}
	wait.For(t, 5*time.Second, "the responses requests in us-1's audit trail", func() bool {
		n := 0
		_, err := audit.Scan(dirs["us"], func(r audit.Record) error {
			if r.Endpoint == "responses" && r.Tenant == "acme-eu" && r.Outcome == "ok" && r.ProviderJurisdictions == "eu" {
				n++
			}
			return nil
		})
		return err == nil && n >= 5
	})
}

// responsesEvents is a native Responses stream's events, as a provider
// sends them: typed, numbered, the Response in created and completed.
func responsesEvents(texts []string, usage bool) string {
	var b strings.Builder
	seq := 0
	ev := func(typ, body string) {
		fmt.Fprintf(&b, "event: %s\ndata: {\"type\":%q,\"sequence_number\":%d,%s}\n\n", typ, typ, seq, body)
		seq++
	}
	resp := `"response":{"id":"resp_hostile","object":"response","created_at":1,"status":"%s","model":"upstream-name","output":[]%s}`
	ev("response.created", fmt.Sprintf(resp, "in_progress", ""))
	for _, s := range texts {
		ev("response.output_text.delta", fmt.Sprintf(`"item_id":"msg_1","output_index":0,"content_index":0,"delta":%q,"logprobs":[]`, s))
	}
	u := ""
	if usage {
		u = `,"usage":{"input_tokens":7,"output_tokens":3,"total_tokens":10}`
	}
	ev("response.completed", fmt.Sprintf(resp, "completed", u))
	return b.String()
}

// A native Responses stream is relayed event by event with its event
// lines, the model renamed to the mesh's, usage taken from
// response.completed and no [DONE] added; one that breaks after its first
// event ends with an error event in the Responses shape; one without
// usage is counted by the node.
func TestResponsesStreamFromAHostileProvider(t *testing.T) {
	whole := responsesEvents([]string{"Hello", " there"}, true)
	cut := whole[:strings.Index(whole, "event: response.completed")]
	noUsage := responsesEvents([]string{"Hello", " there"}, false)
	for _, tc := range []struct {
		name, body string
		check      func(t *testing.T, out string)
	}{
		{"whole", whole, func(t *testing.T, out string) {
			// The terminal event, then the stream's cost.
			if strings.Contains(out, "[DONE]") || !regexp.MustCompile(`"total_tokens":10}}}\n\n: X-LLMesh-Cost: [0-9.]+\n\n$`).MatchString(out) ||
				!strings.Contains(out, "event: response.output_text.delta\ndata: ") || strings.Contains(out, "upstream-name") ||
				!strings.Contains(out, `"model":"gpt-4o-mini"`) {
				t.Fatalf("%q", out)
			}
		}},
		{"cut", cut, func(t *testing.T, out string) {
			last := out[strings.LastIndex(strings.TrimSuffix(out, "\n\n"), "event: "):]
			if !strings.HasPrefix(last, "event: error\ndata: {\"type\":\"error\",\"code\":\"upstream_error\"") ||
				!strings.Contains(last, `"sequence_number":3`) {
				t.Fatalf("last event %q", last)
			}
		}},
		{"no usage", noUsage, func(t *testing.T, out string) {}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := hostile(t, func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path != "/v1/responses" {
					http.NotFound(w, r)
					return
				}
				w.Header().Set("Content-Type", "text/event-stream")
				io.WriteString(w, tc.body)
			})
			f := startNode(t, nil, withBroken(u))
			resp := postPath(t, f.url+"/v1/responses", testKey, `{"model":"gpt-4o-mini","input":"hi","stream":true}`)
			out := readAll(t, resp.Body)
			if resp.StatusCode != 200 {
				t.Fatalf("%d %s", resp.StatusCode, out)
			}
			tc.check(t, out)
			metrics := readAll(t, mustGet(t, f.url+"/metrics").Body)
			want := map[string]string{
				"whole":    `llmesh_tokens_total{direction="completion",model="gpt-4o-mini",provider="broken"} 3`,
				"cut":      `llmesh_streams_truncated_total`,
				"no usage": `llmesh_usage_counted_total{provider="broken"} 1`,
			}[tc.name]
			if !strings.Contains(metrics, want) {
				t.Errorf("metrics lack %s", want)
			}
		})
	}
}

// What the bridge cannot carry to a provider without the Responses API
// (a hosted tool) is a 400 naming the field, and reaches no provider.
func TestResponsesBridgeRefusesWhatChatCannotCarry(t *testing.T) {
	f := startNode(t, []upstream{{name: "vllm", kind: "vllm"}}, nil)
	resp := postPath(t, f.url+"/v1/responses", testKey, `{"model":"gpt-4o-mini","input":"hi","tools":[{"type":"web_search"}]}`)
	body := readAll(t, resp.Body)
	if resp.StatusCode != 400 || !strings.Contains(body, `"param":"tools[0].type"`) || !strings.Contains(body, "invalid_request_error") {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	if n := f.emus["vllm"].Stats().Requests; n != 0 {
		t.Fatalf("the provider got %d requests", n)
	}
}
