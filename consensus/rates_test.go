package consensus

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"
)

// rateLedger is a ledger holding provider p's capacity.
func rateLedger(t *testing.T, rpm, tpm int64) *Ledger {
	t.Helper()
	l := NewLedger()
	c, _ := newCommand("cap", CmdPutRate, RateCapacity{Provider: "p", RPM: rpm, TPM: tpm})
	if r := l.Apply(c); r.Err != "" {
		t.Fatal(r.Err)
	}
	return l
}

// renew applies node's renewal (of its boot) at now, as a leader would,
// with a 30 s lease and a 60 s window.
func renew(t *testing.T, l *Ledger, node string, boot int64, ds []Demand, now time.Time) []Grant {
	t.Helper()
	c, err := ratesCommand(node, boot, ds, 30*time.Second, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	c.Time = now.UnixNano()
	r := l.Apply(c)
	if r.Err != "" {
		t.Fatal(r.Err)
	}
	out := make([]Grant, len(r.Rates))
	for i, g := range r.Rates {
		out[i] = g.Grant()
	}
	return out
}

func grant1(t *testing.T, l *Ledger, node string, ds []Demand, now time.Time) Grant {
	t.Helper()
	return renew(t, l, node, 1, ds, now)[0]
}

// A provider's RPM shared by three nodes with uneven, shifting demand,
// simulated second by second over ten minutes with renewals every five
// seconds, a node restarted (a new process that forgot what it sent) and
// a leader change (a replica restored from a snapshot goes on granting):
// no sixty-second window ever holds more requests than the capacity, and
// the busier node holds the larger share.
func TestRateSharesNeverExceedCapacity(t *testing.T) {
	const capacity = 600
	clock := time.Unix(1_000_000, 0)
	l := rateLedger(t, capacity, 0)
	providers := []RateCapacity{{Provider: "p", RPM: capacity}}
	holders := make([]*RateHolder, 3)
	boots := []int64{1, 1, 1}
	start := func(i int) {
		name := string(rune('a' + i))
		h := NewRateHolder(name, providers, func(_ context.Context, ds []Demand) ([]Grant, time.Duration, time.Duration, error) {
			return renew(t, l, name, boots[i], ds, clock), 30 * time.Second, 5 * time.Second, nil
		}, func() int { return 3 }, func() bool { return false })
		h.now = func() time.Time { return clock }
		holders[i] = h
	}
	for i := range holders {
		start(i)
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
		switch sec {
		case 150, 370: // node b restarts: a new process, nothing sent
			boots[1]++
			start(1)
		case 300: // a new leader: its replica, as a snapshot carries it
			snap, err := l.Snapshot()
			if err != nil {
				t.Fatal(err)
			}
			l = NewLedger()
			if err := l.Restore(snap); err != nil {
				t.Fatal(err)
			}
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
	l := rateLedger(t, 1000, 0)
	full := grant1(t, l, "n", []Demand{{Provider: "p", WantRPM: 5000}}, now).RPM
	cut := grant1(t, l, "n", []Demand{{Provider: "p", WantRPM: 5000, Saw429: true}}, now.Add(time.Hour)).RPM
	if full != 1000 || cut >= full {
		t.Fatalf("full %v, after a 429 %v", full, cut)
	}
	if u := grant1(t, l, "n", []Demand{{Provider: "q"}}, now); !u.Unlimited {
		t.Fatal("a provider without a limit is not unlimited")
	}
}

// A share taken from one node is not handed to another until every
// request it may have admitted under the larger share has left the
// window.
func TestShareMovesOnlyAfterTheWindow(t *testing.T) {
	t0 := time.Unix(0, 0)
	l := rateLedger(t, 600, 0)
	big := grant1(t, l, "a", []Demand{{Provider: "p", WantRPM: 5000}}, t0).RPM
	// a's demand falls; it renews and gets little.
	small := grant1(t, l, "a", []Demand{{Provider: "p", WantRPM: 1}}, t0.Add(10*time.Second)).RPM
	// b asks for all of it while a may still have sent `big` in the window.
	b := grant1(t, l, "b", []Demand{{Provider: "p", WantRPM: 5000}}, t0.Add(40*time.Second)).RPM
	if big+b > 600 {
		t.Fatalf("a was granted %v, then %v; b got %v while a's %v may be in the window", big, small, b, big)
	}
	// Once a's last grant (at 10 s) has expired and a window has passed,
	// b gets it.
	later := grant1(t, l, "b", []Demand{{Provider: "p", WantRPM: 5000}}, t0.Add(10*time.Second+30*time.Second+61*time.Second)).RPM
	if later != 600 {
		t.Fatalf("b got %v once the window had passed", later)
	}
}

// A node that goes quiet after sending its whole share keeps it, as far
// as the others are concerned, for its lease and a window: it may have
// sent all of it in the last minute.
func TestQuietNodesShareIsNotReusedEarly(t *testing.T) {
	t0 := time.Unix(0, 0)
	l := rateLedger(t, 600, 0)
	first := grant1(t, l, "a", []Demand{{Provider: "p", WantRPM: 5000}}, t0).RPM
	for _, at := range []time.Duration{31 * time.Second, 60 * time.Second, 89 * time.Second} {
		if b := grant1(t, l, "b", []Demand{{Provider: "p", WantRPM: 5000}}, t0.Add(at)).RPM; first+b > 600 {
			t.Fatalf("at %v b got %v while a, silent, may have sent %v in the window", at, b, first)
		}
	}
}

// A node restarted under the same name forgot what it sent under its
// earlier share: that share keeps counting against the capacity (its
// lease and a window), so the new process and its peers together stay
// within it; once it can no longer matter, the capacity is whole again.
func TestRestartedNodesEarlierGrantStillCounts(t *testing.T) {
	t0 := time.Unix(0, 0)
	l := rateLedger(t, 600, 0)
	before := renew(t, l, "a", 1, []Demand{{Provider: "p", WantRPM: 5000}}, t0)[0].RPM
	// The restart: boot 2 asks at once, and again as it renews.
	for _, at := range []time.Duration{time.Second, 5 * time.Second, 60 * time.Second, 89 * time.Second} {
		if g := renew(t, l, "a", 2, []Demand{{Provider: "p", WantRPM: 5000}}, t0.Add(at))[0].RPM; before+g > 600 {
			t.Fatalf("%v after a restart the new process got %v while the old one may have sent %v", at, g, before)
		}
	}
	if g := renew(t, l, "a", 2, []Demand{{Provider: "p", WantRPM: 5000}}, t0.Add(91*time.Second))[0].RPM; g != 600 {
		t.Fatalf("once the old grant no longer matters the node gets %v of 600", g)
	}
	// A renewal without a boot (an older node) is the same process.
	if g := renew(t, l, "a", 0, []Demand{{Provider: "p", WantRPM: 5000}}, t0.Add(92*time.Second))[0].RPM; g != 600 {
		t.Fatalf("a renewal without a boot got %v", g)
	}
}

// Rate shares are ledger state: two replicas applying the same renewals
// hold the same shares, byte for byte, and a new leader (a replica
// restored from a snapshot) grants from what its predecessor granted, at
// once: a busy node keeps its share, a newcomer gets what is left.
func TestRateSharesSurviveALeaderChange(t *testing.T) {
	t0 := time.Unix(0, 0)
	a, b := rateLedger(t, 600, 100_000), rateLedger(t, 600, 100_000)
	for i := range 20 {
		now := t0.Add(time.Duration(i) * 5 * time.Second)
		for _, n := range []string{"x", "y", "z"} {
			ds := []Demand{{Provider: "p", WantRPM: float64(100 * (1 + i%3)), WantTPM: 5000}}
			ga, gb := renew(t, a, n, 7, ds, now), renew(t, b, n, 7, ds, now)
			if ga[0] != gb[0] {
				t.Fatalf("replicas granted %+v and %+v", ga[0], gb[0])
			}
		}
	}
	sa, _ := a.Snapshot()
	sb, _ := b.Snapshot()
	if string(sa) != string(sb) {
		t.Fatal("two replicas of the same renewals differ")
	}
	next := NewLedger()
	if err := next.Restore(sa); err != nil {
		t.Fatal(err)
	}
	now := t0.Add(100 * time.Second)
	var held float64
	for _, n := range []string{"x", "y"} {
		held += renew(t, next, n, 7, []Demand{{Provider: "p", WantRPM: 300}}, now)[0].RPM
	}
	fresh := renew(t, next, "w", 1, []Demand{{Provider: "p", WantRPM: 600}}, now)[0].RPM
	z := renew(t, next, "z", 7, []Demand{{Provider: "p", WantRPM: 300}}, now)[0].RPM
	if held+fresh+z > 600 || held == 0 {
		t.Fatalf("after the leader change: x+y %v, a newcomer %v, z %v of 600", held, fresh, z)
	}
	if len(next.Shares()) == 0 {
		t.Fatal("no shares in the ledger's view")
	}
}

// A leader of an earlier version's handover record, read from an old log,
// applies and changes nothing that matters.
func TestOldRateHandoverRecordApplies(t *testing.T) {
	l := NewLedger()
	c := Command{ID: "h", Type: CmdRateHandover, Time: 1,
		Body: []byte(`{"learn_for":5,"shares":[{"provider":"p","node":"a","want_rpm":1,"want_tpm":1,"grants":[{"counts_for":9,"rpm":10,"tpm":-1}]}]}`)}
	if r := l.Apply(c); r.Err != "" {
		t.Fatal(r.Err)
	}
}

// A node whose lease has expired sends nothing to a limited provider,
// unless the mesh has no voters at all; a request above the token share
// is refused.
func TestRateHolderWithoutLease(t *testing.T) {
	now := time.Unix(100, 0)
	providers := []RateCapacity{{Provider: "p", RPM: 600, TPM: 1000}}
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
