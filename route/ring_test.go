package route

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// seat asks the ring for a session's order and seats it on the first
// replica, as a planner and an executor would.
func seatSession(r *Ring, s string, excluded func(int) bool, now time.Time) int {
	var buf [8]int
	i := r.Order(s, excluded, now, buf[:0])[0]
	r.Seat(s, i, now)
	return i
}

// checkBound fails when the busiest live replica holds more than
// c × the mean + 1 sessions.
func checkBound(t *testing.T, r *Ring, excluded func(int) bool) (busiest int64, mean float64) {
	t.Helper()
	var total int64
	live := 0
	for i := range r.replicas {
		if excluded != nil && excluded(i) {
			continue
		}
		total += r.Seated(i)
		busiest = max(busiest, r.Seated(i))
		live++
	}
	mean = float64(total) / float64(live)
	if float64(busiest) > DefaultLoadBound*mean+1 {
		t.Fatalf("busiest replica holds %d sessions, over %.2f × the mean %.1f + 1", busiest, DefaultLoadBound, mean)
	}
	return busiest, mean
}

// 1,000 sessions × 10 turns over 4 replicas, turns interleaved in a new
// random order every round: each session stays on one replica while it is
// healthy, the load bound holds after every placement, and removing a
// replica moves only the sessions it held.
func TestRingAffinity(t *testing.T) {
	reps := []string{"http://10.0.1.10:8000", "http://10.0.1.11:8000", "http://10.0.1.12:8000", "http://10.0.1.13:8000"}
	r := NewRing(reps, DefaultLoadBound)
	rng := rand.New(rand.NewPCG(1, 2))
	sessions := make([]string, 1000)
	for i := range sessions {
		sessions[i] = fmt.Sprintf("conv-%d-%x", i, rng.Uint64())
	}
	now := time.Unix(1e9, 0)
	home := map[string]int{}
	for turn := range 10 {
		rng.Shuffle(len(sessions), func(i, j int) { sessions[i], sessions[j] = sessions[j], sessions[i] })
		for _, s := range sessions {
			i := seatSession(r, s, nil, now)
			if turn == 0 {
				home[s] = i
			} else if home[s] != i {
				t.Fatalf("turn %d of %s went to replica %d, not its replica %d", turn, s, i, home[s])
			}
			checkBound(t, r, nil)
			now = now.Add(time.Millisecond)
		}
	}
	busiest, mean := checkBound(t, r, nil)
	t.Logf("4 replicas: %d %d %d %d sessions; busiest %d = %.2f × the mean", r.Seated(0), r.Seated(1), r.Seated(2), r.Seated(3), busiest, float64(busiest)/mean)

	// Replica 2 fails: its sessions move, and no other.
	down := func(i int) bool { return i == 2 }
	moved, own := 0, 0
	for _, s := range sessions {
		i := seatSession(r, s, down, now)
		switch {
		case home[s] == 2:
			own++
			if i == 2 {
				t.Fatalf("%s stayed on the failed replica", s)
			}
		case i != home[s]:
			t.Fatalf("%s moved from healthy replica %d to %d", s, home[s], i)
		}
		if i != home[s] {
			moved++
		}
		home[s] = i
		now = now.Add(time.Millisecond)
	}
	checkBound(t, r, down)
	t.Logf("replica 2 failed: %d of %d sessions moved (%.1f%%), all of them its own", moved, len(sessions), 100*float64(moved)/float64(len(sessions)))
	if moved != own || moved == 0 {
		t.Fatalf("moved %d, replica 2 held %d", moved, own)
	}
	// When it comes back, nobody moves back: the caches are warm where
	// the sessions are now.
	for _, s := range sessions {
		if i := seatSession(r, s, nil, now); i != home[s] {
			t.Fatalf("%s moved from %d to %d when replica 2 returned", s, home[s], i)
		}
	}
}

// New sessions fill the ring within the bound even when they all hash to
// one replica's arc.
func TestRingBoundsSkewedSessions(t *testing.T) {
	r := NewRing([]string{"a", "b", "c", "d"}, DefaultLoadBound)
	now := time.Unix(1e9, 0)
	var buf [8]int
	// Find 400 keys whose home is replica 0.
	n := 0
	for k := 0; n < 400; k++ {
		key := fmt.Sprintf("k%d", k)
		probe := NewRing([]string{"a", "b", "c", "d"}, DefaultLoadBound)
		if probe.Order(key, nil, now, buf[:0])[0] != 0 {
			continue
		}
		n++
		seatSession(r, key, nil, now)
		checkBound(t, r, nil)
	}
	if r.Seated(0) > int64(math.Ceil(DefaultLoadBound*400/4)) {
		t.Fatalf("replica 0 holds %d of 400", r.Seated(0))
	}
}

// Sessions idle beyond the TTL give their seats up; the counts follow.
func TestRingSessionsExpire(t *testing.T) {
	r := NewRing([]string{"a", "b"}, DefaultLoadBound)
	now := time.Unix(1e9, 0)
	for i := range 100 {
		seatSession(r, fmt.Sprint(i), nil, now)
	}
	if r.Seated(0)+r.Seated(1) != 100 {
		t.Fatalf("seated %d + %d", r.Seated(0), r.Seated(1))
	}
	later := now.Add(DefaultSessionTTL + time.Second)
	for i := range 100 {
		seatSession(r, fmt.Sprint(1000+i), nil, later)
	}
	if got := r.Seated(0) + r.Seated(1); got != 100 {
		t.Fatalf("after expiry %d seated, want the 100 active", got)
	}
}

// Requests without a session go to the replica with the fewest in flight.
func TestRingAnonymousLeastLoaded(t *testing.T) {
	r := NewRing([]string{"a", "b", "c"}, DefaultLoadBound)
	r.Acquire(0)
	r.Acquire(0)
	r.Acquire(2)
	var buf [8]int
	if o := r.Order("", func(i int) bool { return i == 1 }, time.Now(), buf[:0]); o[0] != 2 || o[2] != 1 {
		t.Fatalf("order %v", o)
	}
}

func BenchmarkRingOrder(b *testing.B) {
	r := NewRing([]string{"http://10.0.1.10:8000", "http://10.0.1.11:8000", "http://10.0.1.12:8000", "http://10.0.1.13:8000"}, DefaultLoadBound)
	now := time.Unix(1e9, 0)
	keys := make([]string, 1024)
	for i := range keys {
		keys[i] = fmt.Sprintf("session-%d", i)
		seatSession(r, keys[i], nil, now)
	}
	var buf [8]int
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		r.Order(keys[i&1023], nil, now, buf[:0])
		i++
	}
	if a := testing.AllocsPerRun(100, func() { r.Order(keys[7], nil, now, buf[:0]) }); a != 0 {
		b.Fatalf("a session lookup allocates (%.0f): it must not", a)
	}
}
