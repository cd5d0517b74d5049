package consensus

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/llmesh/llmesh/route"
)

// A provider's RPM shared by three nodes with uneven, shifting demand,
// simulated second by second over ten minutes with renewals every five
// seconds and a leadership change half way: no sixty-second window ever
// holds more requests than the capacity, and the busier node holds the
// larger share.
func TestRateSharesNeverExceedCapacity(t *testing.T) {
	const capacity = 600
	clock := time.Unix(1_000_000, 0)
	a := newAllocator(30*time.Second, time.Minute)
	a.setCapacities([]RateCapacity{{Provider: "p", RPM: capacity}})
	a.startLearning(clock, time.Time{}) // a new cluster: nothing to learn
	a.setReady(true)
	providers := []*route.Provider{{Name: "p", RPM: capacity}}
	var holders []*RateHolder
	for i := range 3 {
		name := string(rune('a' + i))
		h := NewRateHolder(name, providers, func(_ context.Context, ds []Demand) ([]Grant, time.Duration, time.Duration, error) {
			g, err := a.grant(name, ds, clock)
			return g, a.lease, 5 * time.Second, err
		}, func() int { return 3 }, func() bool { return false })
		h.now = func() time.Time { return clock }
		holders = append(holders, h)
	}
	r := rand.New(rand.NewPCG(1, 1))
	// Requests per second each node would like to send, per phase.
	phases := [][3]float64{{8, 1, 0.2}, {1, 8, 0.2}, {4, 4, 4}, {15, 15, 15}, {0.1, 0.1, 12}}
	var sent []int // per second, mesh-wide
	var shareA, shareB float64
	for sec := 0; sec < 600; sec++ {
		if sec%5 == 0 {
			for _, h := range holders {
				if _, err := h.renewOnce(context.Background()); err != nil {
					t.Fatal(err)
				}
			}
		}
		if sec == 300 {
			a.startLearning(clock, a.horizon()) // a new leader, knowing nothing
			a.setReady(true)
		}
		demand := phases[sec/120]
		n := 0
		for i, h := range holders {
			// Poisson-ish arrivals spread over the second.
			k := int(demand[i])
			if r.Float64() < demand[i]-float64(k) {
				k++
			}
			for j := range k {
				at := clock.Add(time.Duration(j) * time.Second / time.Duration(k+1))
				if ok, _ := h.Take("p", 10, at); ok {
					n++
				}
			}
		}
		sent = append(sent, n)
		if sec == 110 {
			shareA, shareB = holders[0].Shares(clock)["p"][0], holders[1].Shares(clock)["p"][0]
		}
		clock = clock.Add(time.Second)
	}
	worst := 0
	for end := 60; end <= len(sent); end++ {
		sum := 0
		for _, n := range sent[end-60 : end] {
			sum += n
		}
		worst = max(worst, sum)
	}
	if worst > capacity {
		t.Fatalf("a 60 s window held %d requests; capacity %d", worst, capacity)
	}
	if shareA <= shareB {
		t.Fatalf("busier node a holds %v, quieter b holds %v", shareA, shareB)
	}
	total := 0
	for _, n := range sent {
		total += n
	}
	t.Logf("busiest 60 s window: %d of %d; shares in phase 1: a=%v b=%v; %d requests in 10 min", worst, capacity, shareA, shareB, total)
}

// 429s shrink what the leader hands out; it recovers while none come.
func TestRateCutOn429(t *testing.T) {
	now := time.Unix(0, 0)
	a := newAllocator(30*time.Second, time.Minute)
	a.setCapacities([]RateCapacity{{Provider: "p", RPM: 1000}})
	a.startLearning(now, time.Time{})
	a.setReady(true)
	full := grant1(t, a, "n", []Demand{{Provider: "p", WantRPM: 5000}}, now).RPM
	cut := grant1(t, a, "n", []Demand{{Provider: "p", WantRPM: 5000, Saw429: true}}, now.Add(time.Hour)).RPM
	if full != 1000 || cut >= full {
		t.Fatalf("full %v, after a 429 %v", full, cut)
	}
	if u := grant1(t, a, "n", []Demand{{Provider: "q"}}, now); !u.Unlimited {
		t.Fatal("a provider without a limit is not unlimited")
	}
}

// A share taken from one node is not handed to another until every
// request it may have admitted under the larger share has left the
// window.
func TestShareMovesOnlyAfterTheWindow(t *testing.T) {
	t0 := time.Unix(0, 0)
	a := newAllocator(30*time.Second, time.Minute)
	a.setCapacities([]RateCapacity{{Provider: "p", RPM: 600}})
	a.startLearning(t0, time.Time{})
	a.setReady(true)
	big := grant1(t, a, "a", []Demand{{Provider: "p", WantRPM: 5000}}, t0).RPM
	// a's demand falls; it renews and gets little.
	small := grant1(t, a, "a", []Demand{{Provider: "p", WantRPM: 1}}, t0.Add(10*time.Second)).RPM
	// b asks for all of it while a may still have sent `big` in the window.
	b := grant1(t, a, "b", []Demand{{Provider: "p", WantRPM: 5000}}, t0.Add(40*time.Second)).RPM
	if big+b > 600 {
		t.Fatalf("a was granted %v, then %v; b got %v while a's %v may be in the window", big, small, b, big)
	}
	// Once a's last grant (at 10 s) has expired and a window has passed,
	// b gets it.
	later := grant1(t, a, "b", []Demand{{Provider: "p", WantRPM: 5000}}, t0.Add(10*time.Second+30*time.Second+61*time.Second)).RPM
	if later != 600 {
		t.Fatalf("b got %v once the window had passed", later)
	}
}

func grant1(t *testing.T, a *allocator, node string, ds []Demand, now time.Time) Grant {
	t.Helper()
	g, err := a.grant(node, ds, now)
	if err != nil {
		t.Fatal(err)
	}
	return g[0]
}

// A node that goes quiet after sending its whole share keeps it, as far
// as the others are concerned, for its lease and a window: it may have
// sent all of it in the last minute.
func TestQuietNodesShareIsNotReusedEarly(t *testing.T) {
	t0 := time.Unix(0, 0)
	a := newAllocator(30*time.Second, time.Minute)
	a.setCapacities([]RateCapacity{{Provider: "p", RPM: 600}})
	a.startLearning(t0, time.Time{})
	a.setReady(true)
	first := grant1(t, a, "a", []Demand{{Provider: "p", WantRPM: 5000}}, t0).RPM
	for _, at := range []time.Duration{31 * time.Second, 60 * time.Second, 89 * time.Second} {
		if b := grant1(t, a, "b", []Demand{{Provider: "p", WantRPM: 5000}}, t0.Add(at)).RPM; first+b > 600 {
			t.Fatalf("at %v b got %v while a, silent, may have sent %v in the window", at, b, first)
		}
	}
}

// A new leader grants nothing until it is ready (it has marked in the
// ledger that shares are being granted).
func TestNoGrantsBeforeReady(t *testing.T) {
	a := newAllocator(30*time.Second, time.Minute)
	a.setCapacities([]RateCapacity{{Provider: "p", RPM: 600}})
	a.startLearning(time.Unix(0, 0), time.Time{})
	if _, err := a.grant("a", []Demand{{Provider: "p", WantRPM: 10}}, time.Unix(1, 0)); err == nil {
		t.Fatal("granted before ready")
	}
}

// A node whose lease has expired sends nothing to a limited provider,
// unless the mesh has no voters at all; a request above the token share
// is refused.
func TestRateHolderWithoutLease(t *testing.T) {
	now := time.Unix(100, 0)
	providers := []*route.Provider{{Name: "p", RPM: 600, TPM: 1000}}
	noVoters := false
	h := NewRateHolder("n", providers, nil, func() int { return 3 }, func() bool { return noVoters })
	if ok, _ := h.Allow("p", 1, now); ok {
		t.Fatal("admitted without a lease while voters exist")
	}
	noVoters = true
	if ok, _ := h.Take("p", 100, now); !ok {
		t.Fatal("refused an even part of the capacity in a mesh without voters")
	}
	if ok, _ := h.Allow("p", 400, now); ok {
		t.Fatal("admitted beyond the token share (1000/3)")
	}
}

// A leader that hands leadership over records what it granted; the next
// leader starts from that: a node holding nothing (just restarted) gets a
// share at once, where a leader learning would give it none for a lease
// and a window; and the shares handed out stay within the capacity.
func TestRateHandoverSkipsLearning(t *testing.T) {
	const capacity = 600
	now := time.Unix(2_000_000, 0)
	old := newAllocator(30*time.Second, time.Minute)
	old.setCapacities([]RateCapacity{{Provider: "p", RPM: capacity}})
	old.startLearning(now, time.Time{})
	old.setReady(true)
	held := map[string]float64{}
	for _, n := range []string{"a", "b"} {
		g, err := old.grant(n, []Demand{{Provider: "p", WantRPM: 100}}, now)
		if err != nil {
			t.Fatal(err)
		}
		held[n] = g[0].RPM
	}
	h := old.handover(now.Add(time.Second))
	if _, err := old.grant("a", []Demand{{Provider: "p", WantRPM: 400}}, now); err == nil {
		t.Fatal("the old leader still grants after its handover")
	}
	// Through the ledger, as a Raft command and a snapshot would carry it.
	l := NewLedger()
	c, _ := newCommand("h", CmdRateHandover, h)
	c.Time = now.UnixNano()
	if r := l.Apply(c); r.Err != "" {
		t.Fatal(r.Err)
	}
	got := l.Handover()
	next := func(from *RateHandover) *allocator {
		a := newAllocator(30*time.Second, time.Minute)
		a.setCapacities([]RateCapacity{{Provider: "p", RPM: capacity}})
		if from != nil {
			a.startFrom(from, now.Add(2*time.Second))
		} else {
			a.startLearning(now.Add(2*time.Second), now.Add(2*time.Minute))
		}
		a.setReady(true)
		return a
	}
	taking := next(got)
	g, err := taking.grant("c", []Demand{{Provider: "p", WantRPM: 100}}, now.Add(2*time.Second))
	if err != nil || g[0].RPM <= 0 {
		t.Fatalf("a restarted node got %v (%v) from a leader that took the handover over", g, err)
	}
	if total := held["a"] + held["b"] + g[0].RPM; total > capacity {
		t.Fatalf("shares %v + %v for c: %v, more than the capacity %d", held, g[0].RPM, total, capacity)
	}
	learning := next(nil)
	if g, _ := learning.grant("c", []Demand{{Provider: "p", WantRPM: 100}}, now.Add(2*time.Second)); g[0].RPM != 0 {
		t.Fatalf("a learning leader granted %v to a node holding nothing", g[0].RPM)
	}
	// A next leader whose clock runs 30 s ahead still counts the old
	// grants: the record's times are relative.
	ahead := newAllocator(30*time.Second, time.Minute)
	ahead.setCapacities([]RateCapacity{{Provider: "p", RPM: capacity}})
	later := now.Add(32 * time.Second)
	ahead.startFrom(got, later)
	ahead.setReady(true)
	if g, _ := ahead.grant("c", []Demand{{Provider: "p", WantRPM: 600}}, later); held["a"]+held["b"]+g[0].RPM > capacity {
		t.Fatalf("a leader with a clock ahead granted %v beside %v", g[0].RPM, held)
	}
	// A leader that was itself still learning hands that over: the next
	// one goes on learning, and gives a node holding nothing nothing.
	learner := next(nil)
	h2 := learner.handover(now.Add(3 * time.Second))
	if h2.LearnFor <= 0 {
		t.Fatal("a learning leader's handover does not say so")
	}
	heir := newAllocator(30*time.Second, time.Minute)
	heir.setCapacities([]RateCapacity{{Provider: "p", RPM: capacity}})
	heir.startFrom(&h2, now.Add(4*time.Second))
	heir.setReady(true)
	if g, _ := heir.grant("c", []Demand{{Provider: "p", WantRPM: 100}}, now.Add(4*time.Second)); g[0].RPM != 0 {
		t.Fatalf("the heir of a learning leader granted %v to a node holding nothing", g[0].RPM)
	}
	// A mark by a leader granting since clears the record.
	m, _ := newCommand("m", CmdRateMark, map[string]int64{"until": now.Add(time.Hour).UnixNano()})
	if r := l.Apply(m); r.Err != "" || l.Handover() != nil {
		t.Fatalf("a rate mark left the handover in place (%s)", r.Err)
	}
}
