package metrics

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/llmesh/llmesh/route"
)

// Tokens and cost count on the node that called the provider: an answer
// relayed from a peer counts the request but neither its tokens nor its
// cost; truncation, counted usage and time to first token count wherever
// the answer came from.
func TestAnsweredCountsTokensWhereTheProviderWasCalled(t *testing.T) {
	m := New(prometheus.NewRegistry())
	here := &route.Result{Target: &route.Target{}, Usage: route.Usage{PromptTokens: 7, CompletionTokens: 3, CachedTokens: 5}, Cost: 0.25, UsageCounted: true}
	there := &route.Result{Target: &route.Target{Via: "peer"}, Usage: route.Usage{PromptTokens: 100, CompletionTokens: 100, CachedTokens: 90}, Cost: 9, Truncated: true}
	m.Answered(Request{Tenant: "t", Model: "m", Provider: "p", Endpoint: "chat", Status: 200, Result: here})
	m.Answered(Request{Tenant: "t", Model: "m", Provider: "p", Endpoint: "chat", Status: 200, Stream: true, Result: there})
	m.Answered(Request{Tenant: "t", Model: "unknown", Endpoint: "embeddings", Status: 400})
	for _, c := range []struct {
		name string
		got  float64
		want float64
	}{
		{"requests 200", testutil.ToFloat64(m.requests.WithLabelValues("chat", "m", "p", "200")), 2},
		{"requests 400", testutil.ToFloat64(m.requests.WithLabelValues("embeddings", "unknown", "", "400")), 1},
		{"prompt tokens", testutil.ToFloat64(m.tokens.WithLabelValues("m", "p", "prompt")), 7},
		{"completion tokens", testutil.ToFloat64(m.tokens.WithLabelValues("m", "p", "completion")), 3},
		{"cached prompt tokens", testutil.ToFloat64(m.cachedTokens.WithLabelValues("m", "p")), 5},
		{"cost", testutil.ToFloat64(m.cost.WithLabelValues("t", "m", "p")), 0.25},
		{"truncated", testutil.ToFloat64(m.truncated.WithLabelValues("p")), 1},
		{"counted", testutil.ToFloat64(m.countedTokens.WithLabelValues("p")), 1},
	} {
		if c.got != c.want {
			t.Errorf("%s: %v, want %v", c.name, c.got, c.want)
		}
	}
	if n := testutil.CollectAndCount(m.ttft); n != 1 {
		t.Errorf("time to first token: %d series, want 1 (the streamed answer's)", n)
	}
	if n := testutil.CollectAndCount(m.admissionWait); n != 1 {
		t.Errorf("admission wait: %d series", n)
	}
}

// Only a refusal for residency is counted as one; a wrapped one is.
func TestRefusedCountsResidencyRefusalsOnly(t *testing.T) {
	m := New(prometheus.NewRegistry())
	m.Refused(errors.New("no"))
	m.Refused(fmt.Errorf("eu: %w", route.ErrNoCompliantProvider))
	m.RefusedHeader()
	if got := testutil.ToFloat64(m.refusals.WithLabelValues("no_compliant_provider")); got != 1 {
		t.Errorf("no_compliant_provider: %v", got)
	}
	if got := testutil.ToFloat64(m.refusals.WithLabelValues("header")); got != 1 {
		t.Errorf("header: %v", got)
	}
}

// Each node's collectors live on its own registry: two nodes in one
// process do not collide, and the exposition passes Prometheus's linter.
func TestNewRegistersOnTheGivenRegistry(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := New(reg)
	New(prometheus.NewRegistry())
	m.Attempt("p", route.OutcomeOK, 20*time.Millisecond)
	m.Probed("p", "ok", &route.Result{Cost: 0.5, Usage: route.Usage{PromptTokens: 1, CompletionTokens: 1}})
	m.HandedOff("self")
	m.Ejected("p")
	m.RaftApplied(time.Millisecond)
	m.InFlight().Inc()
	m.ForwardsSent().Inc()
	m.ForwardsReceived().Inc()
	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("%s: %s", p.Metric, p.Text)
	}
	if got := testutil.ToFloat64(m.probeTokens.WithLabelValues("p")); got != 2 {
		t.Errorf("probe tokens: %v", got)
	}
}
