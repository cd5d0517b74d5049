package consensus

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// Holders that report what they sent, sharing one capacity, simulated
// tick by tick (a tenth of a second) over ten minutes of shifting
// demand, renewing every second: requests keep arriving while a renewal
// is under way (the holder admits them under its frozen share), a tenth
// of the renewals are applied but their answer lost, and some are
// applied again late. No 60 s window ever holds more than the capacity.
func TestReportedSharesNeverExceedCapacity(t *testing.T) {
	const capacity = 120
	clock := time.Unix(1_000_000, 0)
	l := rateLedger(t, capacity, 0)
	caps := []RateCapacity{{Provider: "p", RPM: capacity}}
	r := rand.New(rand.NewPCG(7, 7))
	var sent []time.Time
	holders := make([]*RateHolder, 3)
	var late []Command // renewals applied again, later
	demand := [3]float64{}
	arrive := func(i int, dt time.Duration) { // requests of node i over dt
		k := demand[i] * dt.Seconds()
		n := int(k)
		if r.Float64() < k-float64(n) {
			n++
		}
		for range n {
			if ok, _ := holders[i].Take("p", 1, clock); ok {
				sent = append(sent, clock)
			}
		}
	}
	for i := range holders {
		name := string(rune('a' + i))
		h := NewRateHolder(name, caps, func(_ context.Context, ds []Demand) ([]Grant, time.Duration, time.Duration, error) {
			arrive(i, 500*time.Millisecond) // admitted while the renewal is under way
			c, err := ratesCommand(name, 1, ds, 30*time.Second, time.Minute+RateSlack)
			if err != nil {
				t.Fatal(err)
			}
			c.Time = clock.UnixNano()
			if r.Float64() < 0.05 {
				late = append(late, c)
			}
			res := l.Apply(c)
			if r.Float64() < 0.1 {
				return nil, 0, 0, errors.New("the answer was lost")
			}
			out := make([]Grant, len(res.Rates))
			for j, g := range res.Rates {
				out[j] = g.Grant()
			}
			return out, 30 * time.Second, 5 * time.Second, nil
		}, func() int { return 3 }, func() bool { return false })
		h.now = func() time.Time { return clock }
		h.ReportUsage()
		holders[i] = h
	}
	phases := [][3]float64{{3, 0.2, 0.2}, {0.1, 3, 0.1}, {1, 1, 1}, {0, 0, 4}, {2, 2, 0}}
	for tick := 0; tick < 6000; tick++ {
		if tick%10 == 0 {
			for _, h := range holders {
				_, _ = h.renewOnce(context.Background())
			}
			if len(late) > 0 && r.Float64() < 0.2 { // an old renewal applied again
				c := late[0]
				late = late[1:]
				c.Time = clock.UnixNano()
				l.Apply(c)
			}
		}
		demand = phases[tick/1200]
		for i := range holders {
			arrive(i, 100*time.Millisecond)
		}
		clock = clock.Add(100 * time.Millisecond)
	}
	worst := 0
	for i := range sent {
		j, _ := slices.BinarySearchFunc(sent, sent[i].Add(time.Minute), func(a, b time.Time) int { return a.Compare(b) })
		worst = max(worst, j-i)
	}
	t.Logf("busiest 60 s: %d of %d; %d sent in 10 min", worst, capacity, len(sent))
	if worst > capacity {
		t.Fatalf("a 60 s window held %d requests; capacity %d", worst, capacity)
	}
}

// A share granted to a node that did not use it reaches another at the
// node's next renewal when it reports what it sent; unreported, it stays
// counted for a lease and a window.
func TestUnusedShareMovesAtTheNextRenewal(t *testing.T) {
	for _, reports := range []bool{true, false} {
		now := time.Unix(0, 0)
		l := rateLedger(t, 120, 0)
		ask := func(node string, seq uint64, want float64, at time.Duration) float64 {
			return renew(t, l, node, 1, []Demand{{Provider: "p", WantRPM: want, Nodes: 2, Reports: reports, Seq: seq}}, now.Add(at))[0].RPM
		}
		a := ask("a", 1, 1000, 0) // a burst asks for much, then nothing comes
		b := ask("b", 1, 1000, time.Second)
		ask("a", 2, 1, 2*time.Second) // a's next renewal: it sent nothing
		b2 := ask("b", 2, 1000, 3*time.Second)
		t.Logf("reports %v: a was granted %v, b %v; after a's next renewal b is granted %v", reports, a, b, b2)
		switch {
		case a < 100 || b > 20:
			t.Fatalf("a first was granted %v, b %v: a should hold most", a, b)
		case reports && b2 < 100:
			t.Fatalf("a reported it sent nothing, yet b is granted only %v of 120", b2)
		case !reports && b2 > b:
			t.Fatalf("unreported, a's grant still counts for a window, yet b was granted %v", b2)
		}
	}
}

// A renewal applied late, after a later one, changes nothing: it
// answers no share, and the holder's record stays the later one's.
func TestLateRenewalChangesNothing(t *testing.T) {
	now := time.Unix(0, 0)
	l := rateLedger(t, 100, 0)
	first := []Demand{{Provider: "p", WantRPM: 1000, Reports: true, SentRPM: 0, Seq: 1}}
	second := []Demand{{Provider: "p", WantRPM: 10, Reports: true, SentRPM: 3, Seq: 2}}
	renew(t, l, "a", 1, first, now)
	g := renew(t, l, "a", 1, second, now.Add(time.Second))[0].RPM
	if late := renew(t, l, "a", 1, first, now.Add(2*time.Second))[0]; late.RPM != 0 || late.Unlimited {
		t.Fatalf("a late renewal was granted %+v", late)
	}
	// b finds a's record as the second renewal left it: a's last grant
	// and what it sent, not the first's large grant.
	b := renew(t, l, "b", 1, []Demand{{Provider: "p", WantRPM: 1000}}, now.Add(3*time.Second))[0].RPM
	if b < 100-g-1 || b > 100-g {
		t.Fatalf("a holds %v; b was granted %v of the rest", g, b)
	}
}

// While a reporting holder's renewal is under way, or after one failed,
// it admits no more than it had sent when it asked.
func TestReportingHolderFreezesWhileItAsks(t *testing.T) {
	clock := time.Unix(1_000_000, 0)
	fail := false
	calls := 0
	var during []bool
	var h *RateHolder
	h = NewRateHolder("a", []RateCapacity{{Provider: "p", RPM: 10}}, func(_ context.Context, ds []Demand) ([]Grant, time.Duration, time.Duration, error) {
		calls++
		if calls > 1 {
			if !ds[0].Reports || ds[0].SentRPM != 2 || ds[0].Seq != uint64(calls) {
				t.Errorf("demand %+v: it should report the 2 sent, in renewal %d", ds[0], calls)
			}
			ok, _ := h.Take("p", 1, clock) // a third, while asking: frozen at 2
			during = append(during, ok)
		}
		if fail {
			return nil, 0, 0, errors.New("no leader")
		}
		return []Grant{{Provider: "p", RPM: 10, TPM: math.Inf(1)}}, 30 * time.Second, 5 * time.Second, nil
	}, func() int { return 1 }, func() bool { return false })
	h.now = func() time.Time { return clock }
	h.ReportUsage()
	if _, err := h.renewOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if ok, _ := h.Take("p", 1, clock); !ok {
			t.Fatal("refused under a share of 10")
		}
	}
	if _, err := h.renewOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	if ok, _ := h.Take("p", 1, clock); len(during) != 1 || during[0] || !ok {
		t.Fatalf("admitted while asking: %v; after the grant: %v", during, ok)
	}
	// Failed: frozen at what it had sent (3) until a renewal succeeds.
	fail = true
	h.mu.Lock()
	h.shares["p"].sent = h.shares["p"].sent[:2] // (as the check above expects 2 sent)
	h.shares["p"].tokens, h.shares["p"].tokenSum = h.shares["p"].tokens[:2], 2
	h.mu.Unlock()
	_, _ = h.renewOnce(context.Background())
	if ok, _ := h.Take("p", 1, clock); ok {
		t.Fatal("admitted past what it reported after a failed renewal")
	}
}

// A small capacity (a key's few requests a minute) is granted whole to
// the one node that uses it: a node that reports what it sent and asks
// for nothing is granted nothing (it asks when a request waits), and a
// node whose part of the division would come to less than one request
// takes nothing from the busy node's part. (Before, every node wanted
// at least one request: an idle node held one of 4 until its next
// renewal, and kept the busy one at 3 of 4 for good, so that the key
// was refused 429 before its limit.)
func TestIdleHolderLeavesSmallCapacityWhole(t *testing.T) {
	now := time.Unix(0, 0)
	l := rateLedger(t, 4, 0)
	ask := func(node string, seq uint64, want float64, at time.Duration) float64 {
		return renew(t, l, node, 1, []Demand{{Provider: "p", WantRPM: want, Nodes: 2, Reports: true, Seq: seq}}, now.Add(at))[0].RPM
	}
	if idle, busy := ask("b", 1, 0, 0), ask("a", 1, 15, time.Second); idle != 0 || busy != 4 {
		t.Fatalf("the idle node was granted %v, then the busy one %v of 4", idle, busy)
	}
	ask("b", 2, 1, 2*time.Second) // b asks for a little: its part is less than one request
	if busy := ask("a", 2, 15, 3*time.Second); busy != 4 {
		t.Fatalf("beside a node that asks for a little, the busy one was granted %v of 4", busy)
	}
	// Both busy: the division is in proportion again, renewal by renewal.
	var a, b float64
	for i := range uint64(10) {
		a = ask("a", 3+i, 15, time.Duration(4+2*i)*time.Second)
		b = ask("b", 3+i, 15, time.Duration(5+2*i)*time.Second)
	}
	if a != 2 || b != 2 {
		t.Fatalf("both busy: a %v, b %v of 4", a, b)
	}
}

// Untake gives a request back: its count and what is left of its tokens
// (another request's Return may have taken some from it, as the newest:
// that give-back is then lost, counting a little more than was sent,
// never less), and nothing of the requests beside it.
func TestUntakeGivesARequestBack(t *testing.T) {
	at := time.Unix(1_000_000, 0)
	h := NewRateHolder("a", []RateCapacity{{Provider: "key:t/k", RPM: 3, TPM: 300}}, nil, func() int { return 1 }, func() bool { return true })
	h.now = func() time.Time { return at }
	names := []string{"key:t/k"}
	for i := range 3 {
		if ok, _, _ := h.TakeAll(names, 100, at.Add(time.Duration(i)*time.Second), true); !ok {
			t.Fatalf("take %d refused", i)
		}
	}
	h.Return("key:t/k", 30, at.Add(3*time.Second)) // the second's give-back, from the newest
	h.Untake(names, 100, at.Add(2*time.Second))
	h.Untake(names, 100, at.Add(5*time.Second)) // taken at no such time: nothing
	s := h.shares["key:t/k"]
	if len(s.sent) != 2 || !s.sent[1].Equal(at.Add(time.Second)) || s.tokenSum != 200 {
		t.Fatalf("after the third is given back: sent %v, %v tokens", s.sent, s.tokenSum)
	}
	if ok, _, _ := h.TakeAll(names, 100, at.Add(3*time.Second), false); !ok {
		t.Fatal("the request given back still counts")
	}
}

// A holder that reports what it sent keeps one grant in the ledger, its
// last, however often it renews (every second while a key is busy: it
// kept every grant of a lease and a window, some ninety a holder and a
// subject, in every snapshot); and what its report bounded still counts
// when its grants are merged with another boot's.
func TestReportingHolderKeepsOneGrant(t *testing.T) {
	now := time.Unix(0, 0)
	l := rateLedger(t, 120, 0)
	ask := func(node string, boot int64, seq uint64, want, sent float64, at time.Duration) float64 {
		return renew(t, l, node, boot, []Demand{{Provider: "p", WantRPM: want, Nodes: 2, Reports: true, SentRPM: sent, Seq: seq}}, now.Add(at))[0].RPM
	}
	for s := range uint64(120) {
		ask("a", 1, s+1, 1000, 0, time.Duration(s)*time.Second)
	}
	if n := len(l.s.Shares["p"].Holders["a"].Grants); n != 1 {
		t.Fatalf("a reporting holder keeps %d grants", n)
	}
	// a (boot 1) sent 100 under its earlier grants, then asked for little;
	// boot 2 came and went, and boot 1 again: what boot 1 reported still
	// counts against b for a window after it said so.
	ask("a", 1, 200, 1, 100, 130*time.Second)
	ask("a", 2, 1, 1, 0, 131*time.Second)
	ask("a", 1, 201, 1, 0, 132*time.Second)
	ask("a", 2, 2, 1, 0, 133*time.Second)
	if b := ask("b", 1, 1, 1000, 0, 134*time.Second); b > 20 {
		t.Fatalf("b was granted %v of 120 while a's boot had sent 100 within the window", b)
	}
}
