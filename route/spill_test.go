package route

import (
	"strings"
	"testing"
	"time"

	"github.com/llmesh/llmesh/region"
)

// spillFixture is an eu tenant's planner over a cheap eu GPU provider of
// four replicas, a dearer eu cloud provider and a cheap us one.
func spillFixture(t *testing.T, eucloud bool, capacity []int, groups ...Group) (*Planner, *Request, time.Time) {
	t.Helper()
	gpu := offer("gpu", 0.01, 0.01, "eu")
	gpu.Replicas = []string{"http://g0.test", "http://g1.test", "http://g2.test", "http://g3.test"}
	gpu.ReplicaPolicy, gpu.ReplicaCapacity = ReplicaPrefix, capacity
	ps := []Provider{gpu, offer("us-cloud", 0.001, 0.001, "us")}
	if eucloud {
		ps = append(ps, offer("cloud", 1, 1, "eu"))
	}
	cat, err := NewCatalog(ps, groups...)
	if err != nil {
		t.Fatal(err)
	}
	pl := &Planner{Region: "r1", Catalog: cat, Health: NewTracker(DefaultHealthConfig(), TrackerHooks{})}
	req := longChat(t, "doc", "q")
	req.Residency = region.Residency{Jurisdiction: "eu"}
	req.MaxTTFT = time.Second
	return pl, req, time.Unix(1e9, 0)
}

// queued reports every gpu replica with waiting requests queued.
func queued(waiting int, now time.Time) fakeEngines {
	e := fakeEngines{}
	for i := range 4 {
		e[i] = EngineLoad{Running: 8, Waiting: waiting, KVUsage: 0.5, At: now}
	}
	return e
}

// With every local replica's queue predicting a first token past the
// tenant's max_ttft, the plan spills to the compliant cloud provider,
// saying why; when the queues drain, the GPU is first again. The us
// provider, cheapest of all, is never in the plan.
func TestSpillOverOnPredictedTTFT(t *testing.T) {
	pl, req, now := spillFixture(t, true, nil)
	for _, c := range []struct {
		name    string
		waiting int
		first   string
	}{
		{"idle", 0, "gpu"},
		{"saturated", 6, "cloud"}, // 6 × 250 ms waiting + 400 ms prefill > 1 s
		{"drained", 1, "gpu"},
	} {
		pl.Engines = queued(c.waiting, now)
		plan, err := pl.Plan(req, now)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if got := plan.Targets[0].Provider(); got != c.first {
			t.Errorf("%s: first %s, want %s: %v", c.name, got, c.first, order(plan))
		}
		for _, tg := range plan.Targets {
			if tg.Provider() == "us-cloud" {
				t.Errorf("%s: an eu tenant's plan has the us provider: %v", c.name, order(plan))
			}
		}
		spilled := c.first == "cloud"
		gpu := plan.Targets[len(plan.Targets)-1]
		if spilled {
			if gpu.Provider() != "gpu" || !strings.HasPrefix(gpu.OverTTFT, "spilled: predicted TTFT ") ||
				!strings.HasSuffix(gpu.OverTTFT, "> max_ttft 1000ms") {
				t.Errorf("%s: spilled target %s: %q", c.name, gpu.Provider(), gpu.OverTTFT)
			}
			if x := plan.Explain(0, nil); !strings.Contains(x, "gpu spilled: predicted TTFT") {
				t.Errorf("%s: X-LLMesh-Route does not say why: %s", c.name, x)
			}
		} else if plan.Targets[0].OverTTFT != "" {
			t.Errorf("%s: spilled: %q", c.name, plan.Targets[0].OverTTFT)
		}
	}
	// Without an objective, nothing spills however long the queue.
	req.MaxTTFT = 0
	pl.Engines = queued(20, now)
	if plan, err := pl.Plan(req, now); err != nil || plan.Targets[0].Provider() != "gpu" {
		t.Fatalf("no max_ttft: %v %v", order(plan), err)
	}
}

// Requests this node sent since the engines' last reading join the batch
// while the reading left room for them (the KV cache free, at what each
// running request holds) and the queue beyond, so that a burst between
// two scrapes spills once the queue it makes predicts a first token past
// max_ttft; with room, running costs little, and nothing spills.
func TestSpillOverCountsRequestsSentSinceTheReading(t *testing.T) {
	pl, req, now := spillFixture(t, true, nil)
	gpu := pl.Catalog.Provider("gpu")
	for _, c := range []struct {
		name    string
		waiting int
		kv      float64
		sent    int // per replica, beyond the reading
		first   string
	}{
		{"a short queue", 1, 0.5, 0, "gpu"},
		{"a short queue and a burst since", 1, 0.5, 4, "cloud"},
		{"room for the burst since", 0, 0.5, 4, "gpu"},           // 8 running in half the cache: room for 8 more
		{"room for part of the burst since", 0, 0.8, 6, "cloud"}, // room for 2: 4 wait
		{"a full KV cache and a burst since", 0, 0.95, 4, "cloud"},
	} {
		e := fakeEngines{}
		for i := range 4 {
			e[i] = EngineLoad{Running: 8, Waiting: c.waiting, KVUsage: c.kv, At: now}
			for range 8 + c.waiting + c.sent {
				gpu.Ring.Acquire(i)
			}
		}
		pl.Engines = e
		plan, err := pl.Plan(req, now)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if got := plan.Targets[0].Provider(); got != c.first {
			t.Errorf("%s: first %s, want %s: %v", c.name, got, c.first, order(plan))
		}
		for i := range 4 {
			for range 8 + c.waiting + c.sent {
				gpu.Ring.Release(i)
			}
		}
	}
}

// A group's max_ttft applies to requests naming the group; a tenant's
// tighter one wins.
func TestSpillOverGroupObjective(t *testing.T) {
	pl, _, now := spillFixture(t, true, nil, Group{Name: "auto", Members: []string{"m"}, MaxTTFT: 3 * time.Second})
	req := longChat(t, "doc", "q")
	req.Chat.Model = "auto"
	req.Residency = region.Residency{Jurisdiction: "eu"}
	pl.Engines = queued(6, now) // about 1.9 s
	plan, err := pl.Plan(req, now)
	if err != nil || plan.Targets[0].Provider() != "gpu" || plan.MaxTTFT != 3*time.Second {
		t.Fatalf("within the group's 3s: %v %v %v", order(plan), plan.MaxTTFT, err)
	}
	req.MaxTTFT = time.Second
	if plan, err = pl.Plan(req, now); err != nil || plan.Targets[0].Provider() != "cloud" || plan.MaxTTFT != time.Second {
		t.Fatalf("the tenant's 1s: %v %v %v", order(plan), plan.MaxTTFT, err)
	}
}

// An eu tenant with only an eu GPU and a us cloud provider stays on the
// GPU however long its queue: the request queues there, and with every
// replica at its max_concurrent it is refused, never sent to us.
func TestSpillOverNeverLeavesTheResidency(t *testing.T) {
	pl, req, now := spillFixture(t, false, []int{1, 1, 1, 1})
	pl.Engines = queued(20, now)
	plan, err := pl.Plan(req, now)
	if err != nil {
		t.Fatal(err)
	}
	if got := order(plan); len(got) == 0 || got[0] != "gpu" || got[len(got)-1] != "gpu" {
		t.Fatalf("plan %v, want the gpu alone", got)
	}
	if plan.Targets[0].OverTTFT == "" {
		t.Errorf("the slow gpu is not marked over its objective")
	}
	if x := plan.Explain(0, nil); !strings.Contains(x, "with no other provider within it") {
		t.Errorf("X-LLMesh-Route: %s", x)
	}
	gpu := pl.Catalog.Provider("gpu")
	for i := range 4 {
		gpu.Ring.Acquire(i)
	}
	plan, err = pl.Plan(req, now)
	if err == nil {
		t.Fatalf("every eu replica full, planned %v", order(plan))
	}
	for _, tg := range plan.Targets {
		if tg.Provider() == "us-cloud" {
			t.Fatalf("sent to us: %v", order(plan))
		}
	}
}

// fakeRemote reports one provider's gossiped engine load, by region.
type fakeRemote struct {
	provider, region string
	e                RemoteEngine
}

func (f *fakeRemote) Engine(provider, regionName string) (RemoteEngine, bool) {
	return f.e, provider == f.provider && regionName == f.region && f.e.Replicas > 0
}

// Cross-region: a us node with no GPUs sends an eu tenant's request to
// the eu GPUs through an eu node while what their region gossips of
// their engines predicts a first token within max_ttft, to the eu cloud
// when it does not, never to the us GPUs; a us tenant's goes to the us
// GPUs, which this node calls itself.
func TestSpillOverAcrossRegions(t *testing.T) {
	gpuEU := offer("gpu-eu", 0.01, 0.01, "eu")
	gpuEU.Reach, gpuEU.Region = ReachRegion, "eu-west"
	gpuUS := offer("gpu-us", 0.01, 0.01, "us")
	gpuUS.Reach, gpuUS.Region = ReachRegion, "us-east"
	cloud := offer("cloud-eu", 1, 1, "eu")
	remote := &fakeRemote{provider: "gpu-eu", region: "eu-west"}
	pl := &Planner{Self: "us-1", Region: "us-east", Catalog: testCatalog(t, gpuEU, gpuUS, cloud),
		Health: NewTracker(DefaultHealthConfig(), TrackerHooks{}), Mesh: fakeMesh{"eu-west": "eu-1"}, Remote: remote}
	now := time.Unix(0, 0)
	req := longChat(t, "doc", "q") // about 400 ms of prefill
	req.Residency, req.MaxTTFT = region.Residency{Jurisdiction: "eu"}, time.Second
	for _, c := range []struct {
		name  string
		e     RemoteEngine
		first string
	}{
		{"nothing gossiped", RemoteEngine{}, "gpu-eu"},
		{"room", RemoteEngine{Replicas: 4, Running: 16, Waiting: 2, KVUsage: 0.5}, "gpu-eu"},
		{"queued", RemoteEngine{Replicas: 4, Running: 64, Waiting: 16, KVUsage: 0.95}, "cloud-eu"},
		{"drained", RemoteEngine{Replicas: 4, Running: 8, KVUsage: 0.3}, "gpu-eu"},
	} {
		remote.e = c.e
		plan, err := pl.Plan(req, now)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if got := order(plan); got[0] != c.first || len(got) != 2 {
			t.Errorf("%s: plan %v, want %s first of gpu-eu and cloud-eu", c.name, got, c.first)
		}
		if tg := plan.Targets[0]; tg.Provider() == "gpu-eu" && tg.Via != "eu-1" {
			t.Errorf("%s: gpu-eu not through eu-1: %q", c.name, tg.Via)
		}
		if over := plan.Targets[1].OverTTFT; (c.first == "cloud-eu") != strings.HasPrefix(over, "spilled: predicted TTFT") {
			t.Errorf("%s: second target's reason %q", c.name, over)
		}
	}
	us := longChat(t, "doc", "q")
	us.Residency = region.Residency{Jurisdiction: "us"}
	if plan, err := pl.Plan(us, now); err != nil || order(plan)[0] != "gpu-us" || plan.Targets[0].Via != "" {
		t.Fatalf("a us tenant's plan: %v %v", order(plan), err)
	}
}
