package gossip

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/llmesh/llmesh/route"
	"github.com/llmesh/llmesh/sim/harness/wait"
)

// fastTimings is memberlist's LAN profile with failure detection sped up
// so that tests of failure and partition finish in seconds. Propagation
// tests use the LAN profile as it is.
func fastTimings() *memberlist.Config {
	c := memberlist.DefaultLANConfig()
	c.ProbeInterval = 200 * time.Millisecond
	c.ProbeTimeout = 100 * time.Millisecond
	c.SuspicionMult = 2
	c.PushPullInterval = time.Second
	c.GossipToTheDeadTime = 2 * time.Second
	c.TCPTimeout = time.Second
	return c
}

type testNode struct {
	mesh    *Mesh
	tracker *route.Tracker
	cfg     Config
}

// testCluster starts n nodes on loopback joined through the first, and
// stops them when the test ends.
func testCluster(t testing.TB, n int, edit func(i int, c *Config)) []*testNode {
	t.Helper()
	var nodes []*testNode
	for i := range n {
		c := DefaultConfig(fmt.Sprintf("n%02d", i))
		c.BindAddr, c.BindPort = "127.0.0.1", 0
		c.Memberlist = fastTimings
		c.Meta = Meta{Region: []string{"eu-west", "us-east"}[i%2], Jurisdiction: []string{"eu", "us"}[i%2], HTTP: "127.0.0.1:1"}
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
		c.PublishInterval = 50 * time.Millisecond
		c.SummaryInterval = 20 * time.Millisecond
		c.ReconnectInterval = 200 * time.Millisecond
		if i > 0 {
			c.Seeds = []string{nodes[0].mesh.Addr()}
		}
		if edit != nil {
			edit(i, &c)
		}
		nodes = append(nodes, startTestNode(t, c))
	}
	return nodes
}

func startTestNode(t testing.TB, c Config) *testNode {
	t.Helper()
	tr := route.NewTracker(route.DefaultHealthConfig(), route.TrackerHooks{})
	m, err := New(c, tr, func() Load { return Load{} })
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Shutdown() })
	return &testNode{mesh: m, tracker: tr, cfg: c}
}

func stateOf(m *Mesh, name string) string {
	for _, mem := range m.Members() {
		if mem.Name == name {
			return mem.State
		}
	}
	return "unknown"
}

func allSee(nodes []*testNode, name, state string) func() bool {
	return func() bool {
		for _, n := range nodes {
			if n.cfg.Name != name && stateOf(n.mesh, name) != state {
				return false
			}
		}
		return true
	}
}

// failing makes tr see provider fail until it is ejected.
func failing(tr *route.Tracker, provider string) {
	now := time.Now()
	for range route.DefaultHealthConfig().EjectAfter {
		if a, ok := tr.Acquire(provider, now); ok {
			tr.Failure(a, now)
		}
	}
}

func TestMembership(t *testing.T) {
	nodes := testCluster(t, 5, nil)
	wait.For(t, 10*time.Second, "every node to see all five alive", func() bool {
		for _, n := range nodes {
			alive := 0
			for _, m := range n.mesh.Members() {
				if m.State == "alive" {
					alive++
				}
			}
			if alive != 5 {
				return false
			}
		}
		return true
	})
	for _, m := range nodes[3].mesh.Members() {
		if m.Meta.HTTP != "127.0.0.1:1" || m.Meta.Region == "" {
			t.Fatalf("metadata not carried: %+v", m)
		}
	}
	if !nodes[4].mesh.Joined() {
		t.Fatal("a node with seeds that answered is not joined")
	}

	// n02 observes a provider; everyone holds its report.
	failing(nodes[2].tracker, "p")
	wait.For(t, 10*time.Second, "n02's observation to reach every node", func() bool {
		for _, n := range nodes {
			if !hasReport(n.mesh, "n02", "p") {
				return false
			}
		}
		return true
	})

	// A killed node is marked failed and its observations disappear.
	if err := nodes[2].mesh.Shutdown(); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 20*time.Second, "n02 to be marked failed", allSee(nodes, "n02", "failed"))
	wait.For(t, 5*time.Second, "n02's observations to be dropped", func() bool {
		for i, n := range nodes {
			if i != 2 && hasReport(n.mesh, "n02", "p") {
				return false
			}
		}
		return true
	})

	// A node that leaves gracefully is marked left.
	if err := nodes[3].mesh.Leave(); err != nil {
		t.Fatal(err)
	}
	_ = nodes[3].mesh.Shutdown()
	live := []*testNode{nodes[0], nodes[1], nodes[4]}
	defer func() {
		for _, n := range live {
			t.Logf("%s sees n03 %s", n.cfg.Name, stateOf(n.mesh, "n03"))
		}
	}()
	wait.For(t, 10*time.Second, "n03 to be marked left", allSee(live, "n03", "left"))
}

func hasReport(m *Mesh, observer, provider string) bool {
	for _, r := range m.Reports() {
		if r.Observer == observer && r.Provider == provider {
			return true
		}
	}
	return false
}

// A node restarted with the same name and address rejoins cleanly, and
// its new reports are taken although its old ones were dropped.
func TestRestartWithSameName(t *testing.T) {
	nodes := testCluster(t, 3, nil)
	wait.For(t, 10*time.Second, "three alive", allSee(nodes, "n02", "alive"))
	failing(nodes[2].tracker, "p")
	wait.For(t, 5*time.Second, "n02's report", func() bool { return hasReport(nodes[0].mesh, "n02", "p") })
	addr := nodes[2].mesh.Addr()
	_ = nodes[2].mesh.Shutdown()
	wait.For(t, 20*time.Second, "n02 failed", allSee(nodes[:2], "n02", "failed"))

	c := nodes[2].cfg
	_, port, _ := strings.Cut(addr, ":")
	fmt.Sscan(port, &c.BindPort)
	again := startTestNode(t, c)
	wait.For(t, 20*time.Second, "n02 alive again", allSee(nodes[:2], "n02", "alive"))
	failing(again.tracker, "q")
	wait.For(t, 5*time.Second, "the restarted n02's report", func() bool { return hasReport(nodes[0].mesh, "n02", "q") })
}

func TestPartitionHeals(t *testing.T) {
	nodes := testCluster(t, 5, nil)
	wait.For(t, 10*time.Second, "all alive", func() bool {
		for _, n := range nodes {
			if !allSee(nodes, n.cfg.Name, "alive")() {
				return false
			}
		}
		return true
	})
	side := map[string]int{}
	for i, n := range nodes {
		side[n.mesh.Addr()] = min(i/2, 1) // {n00,n01} | {n02,n03,n04}
	}
	for i, n := range nodes {
		mine := min(i/2, 1)
		n.mesh.Partition(func(addr string) bool { s, ok := side[addr]; return ok && s != mine })
	}
	wait.For(t, 30*time.Second, "each side to see the other failed", func() bool {
		return stateOf(nodes[0].mesh, "n04") == "failed" && stateOf(nodes[4].mesh, "n00") == "failed"
	})
	// While cut off, n04 learns of a failing provider; n00 cannot know.
	failing(nodes[4].tracker, "p")
	// Long enough for memberlist to stop gossiping to the dead, so only
	// the reconnect loop can bring the sides back together.
	time.Sleep(fastTimings().GossipToTheDeadTime + 500*time.Millisecond) // the fault lasts this long; nothing is awaited
	for _, n := range nodes {
		n.mesh.Partition(nil)
	}
	took := wait.For(t, 30*time.Second, "the views to converge", func() bool {
		for _, n := range nodes {
			for _, o := range nodes {
				if stateOf(n.mesh, o.cfg.Name) != "alive" {
					return false
				}
			}
			if n != nodes[4] && !hasReport(n.mesh, "n04", "p") {
				return false
			}
		}
		return true
	})
	t.Logf("views converged %v after healing", took)
}

func TestMetaLimit(t *testing.T) {
	big := Meta{Region: "eu-west", Build: strings.Repeat("x", 600)}
	if _, err := big.Encode(); !errors.Is(err, ErrMetaTooLarge) {
		t.Fatalf("encode: %v", err)
	}
	c := DefaultConfig("n")
	c.Meta = big
	if _, err := New(c, route.NewTracker(route.DefaultHealthConfig(), route.TrackerHooks{}), nil); !errors.Is(err, ErrMetaTooLarge) {
		t.Fatalf("New: %v", err)
	}
	nodes := testCluster(t, 1, nil)
	before := nodes[0].mesh.Meta()
	if err := nodes[0].mesh.SetMeta(big); !errors.Is(err, ErrMetaTooLarge) {
		t.Fatalf("SetMeta: %v", err)
	}
	if nodes[0].mesh.Meta() != before {
		t.Fatal("oversize metadata replaced the old")
	}
	ok := before
	ok.State = StateDraining
	if err := nodes[0].mesh.SetMeta(ok); err != nil {
		t.Fatal(err)
	}
	// Round trip of every field, at the limit's edge.
	full := Meta{Region: strings.Repeat("r", 100), Jurisdiction: "eu", Voter: true, State: StateDraining,
		RPC: "[2001:db8::1]:7070", HTTP: "10.0.0.5:8080", Build: strings.Repeat("b", 260), Raft: "10.0.0.5:7947"}
	b, err := full.Encode()
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeMeta(b)
	if err != nil || got != full {
		t.Fatalf("round trip: %+v %v", got, err)
	}
}

// A provider failing on one node is ranked down on another that never
// called it, within a stated bound, with LAN timings.
func TestPropagationChangesTheView(t *testing.T) {
	nodes := testCluster(t, 5, func(i int, c *Config) {
		c.Memberlist = memberlist.DefaultLANConfig
		c.PublishInterval = 500 * time.Millisecond // the default
		c.SummaryInterval = 100 * time.Millisecond
	})
	wait.For(t, 10*time.Second, "all alive", allSee(nodes, "n00", "alive"))
	a, e := nodes[0], nodes[4]
	now := time.Now()
	if e.mesh.View().Health("p", now).Degraded {
		t.Fatal("degraded before anything happened")
	}
	// A's outlier detector ejects p; the tracker's hook nudges gossip.
	start := time.Now()
	failing(a.tracker, "p")
	a.mesh.Changed()
	took := wait.For(t, 2*time.Second, "E to rank p down", func() bool { return e.mesh.View().Health("p", time.Now()).Degraded })
	t.Logf("a failure seen on n00 reached n04's view in %v", took)

	// A 429 cooldown learned by one node holds on all.
	adm, _ := nodes[1].tracker.Acquire("q", start)
	nodes[1].tracker.RateLimited(adm, 30*time.Second, time.Now())
	nodes[1].mesh.Changed()
	wait.For(t, 2*time.Second, "E to respect n01's cooldown", func() bool {
		return e.mesh.View().Health("q", time.Now()).CoolingUntil.After(time.Now().Add(20 * time.Second))
	})

	// Peers' latency fills in for a provider E has not called.
	adm, _ = nodes[2].tracker.Acquire("r", time.Now())
	nodes[2].tracker.Success(adm, 120*time.Millisecond, 0)
	nodes[2].mesh.Changed()
	wait.For(t, 2*time.Second, "E to learn r's latency", func() bool {
		return e.mesh.View().Health("r", time.Now()).TTFT == 120*time.Millisecond
	})
	// E's own recent success outweighs the peers' report of p failing.
	adm, _ = e.tracker.Acquire("p", time.Now())
	e.tracker.Success(adm, 50*time.Millisecond, 0)
	if e.mesh.View().Health("p", time.Now()).Degraded {
		t.Fatal("E's own success did not outweigh peers")
	}
}

func TestEncryptionAndLabel(t *testing.T) {
	key := []byte("0123456789abcdef0123456789abcdef")
	var logs syncBuffer
	nodes := testCluster(t, 2, func(i int, c *Config) {
		c.SecretKey, c.Label = key, "prod"
		c.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	})
	wait.For(t, 10*time.Second, "encrypted nodes to join", allSee(nodes, "n01", "alive"))
	for _, bad := range []struct {
		name string
		edit func(c *Config)
	}{
		{"wrong key", func(c *Config) { c.SecretKey = []byte("ffffffffffffffffffffffffffffffff") }},
		{"no key", func(c *Config) { c.SecretKey = nil }},
		{"other label", func(c *Config) { c.Label = "staging" }},
	} {
		c := DefaultConfig("intruder-" + strings.ReplaceAll(bad.name, " ", "-"))
		c.BindAddr, c.BindPort, c.Memberlist = "127.0.0.1", 0, fastTimings
		c.SecretKey, c.Label = key, "prod"
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
		bad.edit(&c)
		x := startTestNode(t, c)
		if n, err := x.mesh.Join([]string{nodes[0].mesh.Addr()}); n > 0 || err == nil {
			t.Fatalf("%s: joined (%d, %v)", bad.name, n, err)
		}
		if stateOf(nodes[0].mesh, c.Name) != "unknown" {
			t.Fatalf("%s: the mesh took it in", bad.name)
		}
	}
	for _, form := range []string{string(key), base64.StdEncoding.EncodeToString(key), fmt.Sprintf("%x", key), fmt.Sprint(key)} {
		if strings.Contains(logs.String(), form) {
			t.Fatalf("the gossip key appears in the logs as %q", form)
		}
	}
	c := DefaultConfig("short-key")
	c.SecretKey = []byte("short")
	if _, err := New(c, nil, nil); err == nil || !strings.Contains(err.Error(), "32 bytes") {
		t.Fatalf("short key: %v", err)
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// The gossip metrics say how many members are in which state, how deep
// the broadcast queue is, how many bytes gossip costs and how old the
// freshest reports are.
func TestGossipMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	nodes := testCluster(t, 3, func(i int, c *Config) {
		if i == 0 {
			c.Registerer = reg
		}
	})
	wait.For(t, 10*time.Second, "three alive", allSee(nodes, "n02", "alive"))
	failing(nodes[1].tracker, "p")
	wait.For(t, 5*time.Second, "n01's report at n00", func() bool { return hasReport(nodes[0].mesh, "n01", "p") })
	_ = nodes[2].mesh.Shutdown()
	wait.For(t, 20*time.Second, "n02 failed", allSee(nodes[:2], "n02", "failed"))
	got := map[string]float64{}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			name := mf.GetName()
			for _, l := range m.GetLabel() {
				name += "/" + l.GetValue()
			}
			got[name] = m.GetGauge().GetValue() + m.GetCounter().GetValue()
		}
	}
	for name, check := range map[string]func(float64) bool{
		"llmesh_gossip_members/alive":               func(v float64) bool { return v == 2 },
		"llmesh_gossip_members/failed":              func(v float64) bool { return v == 1 },
		"llmesh_gossip_bytes_total/sent":            func(v float64) bool { return v > 0 },
		"llmesh_gossip_bytes_total/received":        func(v float64) bool { return v > 0 },
		"llmesh_gossip_observations":                func(v float64) bool { return v >= 1 },
		"llmesh_gossip_observation_age_max_seconds": func(v float64) bool { return v >= 0 && v < 30 },
		"llmesh_gossip_broadcast_queue_depth":       func(v float64) bool { return v >= 0 },
		"llmesh_gossip_joined":                      func(v float64) bool { return v == 1 },
	} {
		if v, ok := got[name]; !ok || !check(v) {
			t.Errorf("%s = %v (present %v)", name, v, ok)
		}
	}
}
