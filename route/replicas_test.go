package route

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"
)

// fakeEngines reports fixed engine loads by replica.
type fakeEngines map[int]EngineLoad

func (f fakeEngines) Replica(_ string, i int) (EngineLoad, bool) {
	e, ok := f[i]
	return e, ok
}

// replicaFixture is a planner over a provider "gpu" of four replicas
// under policy, and a dearer single "cloud" after it.
type replicaFixture struct {
	pl  *Planner
	gpu *Provider
	e   *Executor
	now time.Time
}

func newReplicaFixture(t testing.TB, policy ReplicaPolicy, capacity ...int) *replicaFixture {
	t.Helper()
	gpu := offer("gpu", 0.01, 0.01, "eu")
	gpu.Replicas = []string{"http://g0.test", "http://g1.test", "http://g2.test", "http://g3.test"}
	gpu.ReplicaPolicy, gpu.ReplicaCapacity = policy, capacity
	cat := testCatalog(t, gpu, offer("cloud", 1, 1, "eu"))
	tr := NewTracker(DefaultHealthConfig(), TrackerHooks{})
	f := &replicaFixture{pl: &Planner{Region: "r1", Catalog: cat, Health: tr}, gpu: cat.Provider("gpu"), now: time.Unix(1e9, 0)}
	f.e = NewExecutor(DefaultExecutorConfig(), ExecutorDeps{Tracker: tr, Clock: func() time.Time { return f.now }})
	return f
}

// replicas plans req and returns the gpu targets' replicas in order.
func (f *replicaFixture) replicas(t testing.TB, req *Request) ([]int, *Plan) {
	t.Helper()
	plan, err := f.pl.Plan(req, f.now)
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	for _, tg := range plan.Targets {
		if tg.Provider() == "gpu" {
			out = append(out, tg.Replica)
		}
	}
	return out, plan
}

// send admits req's first gpu target, as the executor does before a
// call, and returns its ticket.
func (f *replicaFixture) send(t testing.TB, req *Request) (*Ticket, int) {
	t.Helper()
	plan, err := f.pl.Plan(req, f.now)
	if err != nil {
		t.Fatal(err)
	}
	tk, err := f.e.Admit(context.Background(), req, &plan.Targets[0])
	if err != nil {
		t.Fatal(err)
	}
	return tk, plan.Targets[0].Replica
}

// longChat is a chat request of a 4,000-token document and a question.
func longChat(t testing.TB, doc, question string) *Request {
	return chatBody(t, "", text(doc, 16000), question)
}

// Knowing nothing of prefixes or load, the prefix policy orders replicas
// as the session's ring does today; a request without a session follows
// its prompt's first chunk on the ring, and a short one without any key
// goes to the least loaded.
func TestReplicaPrefixKnowingNothingIsTheRing(t *testing.T) {
	f := newReplicaFixture(t, ReplicaPrefix)
	for s := range 50 {
		req := longChat(t, fmt.Sprint("doc", s), "q")
		req.Session = fmt.Sprint("conv-", s)
		got, plan := f.replicas(t, req)
		var buf [8]int
		if want := f.gpu.Ring.Order(req.Session, nil, f.now, buf[:0]); !equalInts(got, want) {
			t.Fatalf("session %d: %v, the ring has %v", s, got, want)
		}
		if c := plan.ReplicaChoice(0); c.Reason != ReasonSession || c.CachedTokens != 0 {
			t.Fatalf("session %d: %+v", s, c)
		}
	}
	req := longChat(t, "stateless", "q")
	got, _ := f.replicas(t, req)
	var buf [8]int
	if want := f.gpu.Ring.OrderAt(req.Prefix(f.gpu.Prefix.Seed()).Hashes[0], nil, buf[:0]); !equalInts(got, want) {
		t.Fatalf("without a session: %v, the first chunk's ring order %v", got, want)
	}
	f.gpu.Ring.Acquire(0)
	f.gpu.Ring.Acquire(1)
	f.gpu.Ring.Acquire(3)
	if got, plan := f.replicas(t, chatReq(t, `{"model":"m","messages":[{"role":"user","content":"hi"}]}`)); got[0] != 2 || plan.ReplicaChoice(0).Reason != ReasonLeastLoaded {
		t.Fatalf("a short request without a key: %v, want the idle replica 2 first", got)
	}
}

// A replica sent a prompt is chosen for the next with its prefix while
// lightly loaded (the first's admission is enough: it need not have been
// answered), and says how much of the prompt it is expected to hold.
func TestReplicaPrefixFollowsTheWarmReplica(t *testing.T) {
	f := newReplicaFixture(t, ReplicaPrefix)
	first := longChat(t, "manual", "How do I reset it?")
	ring, _ := f.replicas(t, first)
	warm := ring[2] // not where the ring would put the prompt
	f.gpu.Prefix.Record(first.Prefix(f.gpu.Prefix.Seed()).Hashes, warm, f.now)
	f.gpu.Ring.Acquire(warm)
	f.gpu.Ring.Acquire(warm)
	next := longChat(t, "manual", "And how do I update it?")
	got, plan := f.replicas(t, next)
	c := plan.ReplicaChoice(0)
	if got[0] != warm || c.Reason != ReasonPredicted || c.CachedTokens < 3900 || c.InFlight != 2 {
		t.Fatalf("order %v (warm %d), choice %+v", got, warm, c)
	}
	if cold := plan.ReplicaChoice(1); cold.CachedTokens != 0 || cold.TTFT <= c.TTFT {
		t.Fatalf("the next replica: %+v", cold)
	}
	why := strings.Join(plan.Why(0), "; ")
	if !strings.Contains(why, "predicted time to first token") || !strings.Contains(why, "cached prompt tokens expected") {
		t.Errorf("why: %s", why)
	}
	if route := plan.Explain(0, nil); !strings.Contains(route, "replica gpu/"+fmt.Sprint(warm)+" by prefix") {
		t.Errorf("X-LLMesh-Route: %s", route)
	}
	// Admission records: a third request follows the second's replica.
	f2 := newReplicaFixture(t, ReplicaPrefix)
	tk, at := f2.send(t, longChat(t, "guide", "one"))
	if _, again := f2.send(t, longChat(t, "guide", "two")); again != at {
		t.Errorf("a burst of one prefix: sent to %d, then %d", at, again)
	}
	tk.Abandon()
}

// A warm replica whose engine is saturated loses to a cold idle one when
// the predicted time to first token says so, and keeps the request when
// its queue is short; stale figures are not believed.
func TestReplicaPrefixWeighsLoad(t *testing.T) {
	f := newReplicaFixture(t, ReplicaPrefix)
	first := longChat(t, "spec", "q1")
	ring, _ := f.replicas(t, first)
	warm := ring[1]
	f.gpu.Prefix.Record(first.Prefix(f.gpu.Prefix.Seed()).Hashes, warm, f.now)
	next := longChat(t, "spec", "q2")
	cases := []struct {
		name   string
		load   EngineLoad
		chosen bool // the warm replica is
	}{
		{"short queue", EngineLoad{Running: 4, Waiting: 1, KVUsage: 0.5, At: f.now}, true},
		{"saturated", EngineLoad{Running: 40, Waiting: 8, KVUsage: 0.97, At: f.now}, false},
		{"saturated but stale", EngineLoad{Running: 40, Waiting: 8, KVUsage: 0.97, At: f.now, Stale: true}, true},
		{"saturated long ago", EngineLoad{Running: 40, Waiting: 8, At: f.now.Add(-time.Minute)}, true},
	}
	for _, c := range cases {
		f.pl.Engines = fakeEngines{warm: c.load}
		got, plan := f.replicas(t, next)
		if (got[0] == warm) != c.chosen {
			t.Errorf("%s: chose %d (warm %d): %+v", c.name, got[0], warm, plan.ReplicaChoice(0))
		}
		if ch := plan.ReplicaChoice(0); c.chosen && ch.Fresh != (c.name == "short queue") {
			t.Errorf("%s: figures used: %v", c.name, ch.Fresh)
		}
	}
	// The engine's figures alone (nothing cached anywhere) steer a new
	// prompt away from a queue.
	f.pl.Engines = fakeEngines{ring[0]: {Waiting: 3, At: f.now}}
	if got, _ := f.replicas(t, longChat(t, "new", "q")); got[0] == ring[0] {
		t.Errorf("a new prompt sent to the replica with a queue: %v", got)
	}
}

// A replica at its max_concurrent is not chosen, nor admitted; with every
// replica full the provider is skipped with the reason, and the plan
// spills over to the next provider.
func TestReplicaMaxConcurrent(t *testing.T) {
	for _, policy := range ReplicaPolicies {
		f := newReplicaFixture(t, policy, 2, 2, 2, 2)
		req := longChat(t, "doc", "q")
		req.Session = "conv-1"
		ring, _ := f.replicas(t, req)
		f.gpu.Ring.Acquire(ring[0])
		f.gpu.Ring.Acquire(ring[0])
		got, plan := f.replicas(t, req)
		if len(got) != 3 || got[0] == ring[0] || plan.ReplicaChoice(0).Full != 1 {
			t.Fatalf("%s: replica %d full, order %v", policy, ring[0], got)
		}
		stale := Target{Offer: plan.Targets[0].Offer, Replica: ring[0]}
		if _, err := f.e.Admit(context.Background(), req, &stale); err == nil || stageOf(t, err) != StageReplica {
			t.Fatalf("%s: a full replica admitted: %v", policy, err)
		}
		for _, i := range ring[1:] {
			f.gpu.Ring.Acquire(i)
			f.gpu.Ring.Acquire(i)
		}
		plan, err := f.pl.Plan(req, f.now)
		if err != nil || plan.Targets[0].Provider() != "cloud" || len(plan.Skipped) != 1 ||
			!strings.Contains(plan.Skipped[0].Reason, "max_concurrent") {
			t.Fatalf("%s: every replica full: %v %v %+v", policy, order(plan), err, plan.Skipped)
		}
	}
}

// least_loaded weighs requests in flight by capacity; round_robin turns
// with every request admitted; session is the ring's order.
func TestReplicaPolicies(t *testing.T) {
	f := newReplicaFixture(t, ReplicaLeastLoaded, 4, 16, 4, 4)
	for range 3 {
		f.gpu.Ring.Acquire(1) // 3 of 16
	}
	f.gpu.Ring.Acquire(0) // 1 of 4
	f.gpu.Ring.Acquire(2)
	f.gpu.Ring.Acquire(3)
	if got, _ := f.replicas(t, longChat(t, "d", "q")); got[0] != 1 {
		t.Errorf("least_loaded: %v, want replica 1 (3 of 16) first", got)
	}
	rr := newReplicaFixture(t, ReplicaRoundRobin)
	var firsts []int
	for range 8 {
		tk, i := rr.send(t, longChat(t, "d", "q"))
		firsts = append(firsts, i)
		tk.Abandon()
	}
	if !equalInts(firsts, []int{0, 1, 2, 3, 0, 1, 2, 3}) {
		t.Errorf("round_robin: %v", firsts)
	}
	s := newReplicaFixture(t, ReplicaSession)
	req := longChat(t, "d", "q")
	req.Session = "conv-9"
	s.gpu.Prefix = nil
	got, plan := s.replicas(t, req)
	var buf [8]int
	if want := s.gpu.Ring.Order("conv-9", nil, s.now, buf[:0]); !equalInts(got, want) || plan.ReplicaChoice(0).Policy != ReplicaSession {
		t.Errorf("session: %v, the ring %v", got, want)
	}
}
