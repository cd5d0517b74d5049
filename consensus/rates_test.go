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
	providers := []*route.Provider{{Name: "p", RPM: capacity}}
	var holders []*RateHolder
	for i := range 3 {
		name := string(rune('a' + i))
		h := NewRateHolder(name, providers, func(_ context.Context, ds []Demand) ([]Grant, time.Duration, time.Duration, error) {
			return a.grant(name, ds, clock), a.lease, 5 * time.Second, nil
		}, func() int { return 3 })
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
	full := a.grant("n", []Demand{{Provider: "p", WantRPM: 5000}}, now)[0].RPM
	cut := a.grant("n", []Demand{{Provider: "p", WantRPM: 5000, Saw429: true}}, now.Add(time.Hour))[0].RPM
	if full != 1000 || cut >= full {
		t.Fatalf("full %v, after a 429 %v", full, cut)
	}
	if u := a.grant("n", []Demand{{Provider: "q"}}, now)[0]; !u.Unlimited {
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
	big := a.grant("a", []Demand{{Provider: "p", WantRPM: 5000}}, t0)[0].RPM
	// a's demand falls; it renews and gets little.
	small := a.grant("a", []Demand{{Provider: "p", WantRPM: 1}}, t0.Add(10*time.Second))[0].RPM
	// b asks for all of it while a may still have sent `big` in the window.
	b := a.grant("b", []Demand{{Provider: "p", WantRPM: 5000}}, t0.Add(40*time.Second))[0].RPM
	if big+b > 600 {
		t.Fatalf("a was granted %v, then %v; b got %v while a's %v may be in the window", big, small, b, big)
	}
	// Once a's large grant has expired and a window has passed, b gets it.
	later := a.grant("b", []Demand{{Provider: "p", WantRPM: 5000}}, t0.Add(30*time.Second+61*time.Second))[0].RPM
	if later < 500 {
		t.Fatalf("b got %v once the window had passed", later)
	}
}
