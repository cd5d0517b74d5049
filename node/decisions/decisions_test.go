package decisions

import (
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/llmesh/llmesh/route"
)

// The ring keeps the last Kept decisions, newest first, and recording
// one allocates nothing.
func TestRing(t *testing.T) {
	var d Ring
	if got := d.Last(10); len(got) != 0 {
		t.Fatalf("empty ring: %d", len(got))
	}
	for i := range Kept + 44 {
		d.Record(Decision{ID: string(rune('a' + i%26)), Status: i})
	}
	got := d.Last(1000)
	if len(got) != Kept || got[0].Status != Kept+43 || got[len(got)-1].Status != 44 {
		t.Fatalf("%d kept, newest %d, oldest %d", len(got), got[0].Status, got[len(got)-1].Status)
	}
	if got := d.Last(3); len(got) != 3 || got[2].Status != Kept+41 {
		t.Fatalf("last 3: %+v", got)
	}
	e := Decision{At: time.Now(), ID: "x", Tenant: "t", Model: "m", Status: 200}
	if a := testing.AllocsPerRun(100, func() { d.Record(e) }); a != 0 {
		t.Fatalf("record allocates %v times", a)
	}
}

func TestOutcome(t *testing.T) {
	for _, c := range []struct {
		status int
		res    *route.Result
		want   string
	}{
		{200, nil, "ok"},
		{200, &route.Result{}, "ok"},
		{200, &route.Result{Truncated: true}, "truncated"},
		{200, &route.Result{CacheHit: true}, "cache_hit"},
		{StatusClientClosed, &route.Result{Truncated: true}, "client_closed"},
		{400, nil, "refused"},
		{429, nil, "refused"},
		{http.StatusServiceUnavailable, nil, "refused"},
		{500, nil, "error"},
		{502, &route.Result{}, "error"},
		{0, nil, "error"},
	} {
		e := Decision{Status: c.status, Result: c.res}
		if got := e.Outcome(); got != c.want {
			t.Errorf("%d %+v: %s, want %s", c.status, c.res, got, c.want)
		}
	}
}

// A view explains a refusal through the node's refusal function (and
// only a refusal), and a served request by its route.
func TestViewExplainsRefusals(t *testing.T) {
	res := &route.Result{Target: &route.Target{Via: "peer"}, Cost: 0.5, Replica: "r1", Usage: route.Usage{PromptTokens: 900, CachedTokens: 768, CompletionTokens: 12},
		Attempts: []route.Attempt{{Provider: "p", Outcome: route.OutcomeOK, Status: 200, Duration: 3 * time.Millisecond}}}
	called := 0
	refusal := func(err error) string { called++; return "code: " + err.Error() }
	v := (&Decision{ID: "a", Status: 200, Result: res, Took: 7 * time.Millisecond, Origin: "o"}).View(refusal)
	if called != 0 || v.Via != "peer" || v.CostUSD != 0.5 || v.Replica != "r1" || len(v.Attempts) != 1 || v.Attempts[0].Millis != 3 ||
		v.Millis != 7 || v.ForwardedBy != "o" || v.Outcome != "ok" || v.Why != res.Route() ||
		v.PromptTokens != 900 || v.CachedTokens != 768 || v.CompletionTokens != 12 {
		t.Fatalf("served: %+v", v)
	}
	v = (&Decision{ID: "b", Status: 404, Err: errors.New("no such model")}).View(refusal)
	if called != 1 || v.Why != "code: no such model" || v.Outcome != "refused" || v.Attempts == nil {
		t.Fatalf("refused: %+v", v)
	}
}
