package route

import (
	"context"
	"net/http/httptest"
	"runtime"
	"testing"
	"time"
	"weak"

	"github.com/llmesh/llmesh/region"
)

// ptrSink is a sink whose identity a weak pointer can follow.
type ptrSink struct{ *httptest.ResponseRecorder }

func (s *ptrSink) Flush() error { return nil }

// A Result outlives its request: the node keeps the last 256 in its
// decision log, and forwards, audit and metrics read it. It must not
// keep the request (its body, and in node the inbound and HTTP sink
// allocated with it) or the sink alive.
func TestResultKeepsNeitherRequestNorSink(t *testing.T) {
	cat := fallbackCatalog(t, Group{Name: "g", Members: []string{"m"}})
	regions, _ := region.NewMap([]region.Region{{Name: "r1", Jurisdiction: "eu"}})
	sp := &scriptedProviders{calls: map[string]int{}}
	tr := NewTracker(DefaultHealthConfig(), TrackerHooks{})
	ex := NewExecutor(DefaultExecutorConfig(), ExecutorDeps{Guard: Guard{Region: "r1", Regions: regions}, Tracker: tr,
		Tokenizer: &Tokenizer{}, Transport: sp})
	pl := &Planner{Region: "r1", Catalog: cat, Health: tr}
	res, wreq, wsink := func() (*Result, weak.Pointer[Request], weak.Pointer[ptrSink]) {
		req := chatReq(t, `{"model":"g","messages":[{"role":"user","content":"hi"}]}`)
		req.Residency = region.Residency{Jurisdiction: "eu"}
		plan, err := pl.Plan(req, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		sink := &ptrSink{httptest.NewRecorder()}
		res, err := ex.Execute(context.Background(), req, plan, sink)
		if err != nil || res.Target == nil {
			t.Fatalf("%v: %+v", err, res)
		}
		return res, weak.Make(req), weak.Make(sink)
	}()
	runtime.GC()
	runtime.GC()
	if wreq.Value() != nil {
		t.Error("a kept Result keeps its request alive")
	}
	if wsink.Value() != nil {
		t.Error("a kept Result keeps its sink alive")
	}
	if res.Route() == "" {
		t.Error("the Result lost its explanation")
	}
	runtime.KeepAlive(res)
}
