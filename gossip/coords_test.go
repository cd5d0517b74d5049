package gossip

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
)

// Vivaldi through the ping delegate, against a known truth: nodes on a
// plane in four well-separated groups plus a per-node access delay, as in
// serf's coordinate tests. After the pings memberlist would make, each
// node's estimated nearest peer is its true nearest peer.
func TestCoordinatesFindTheNearestPeer(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	const n = 24
	type point struct{ x, y, h float64 }
	centres := []point{{0, 0, 0}, {80, 0, 0}, {0, 80, 0}, {80, 80, 0}} // milliseconds
	pts := make([]point, n)
	for i := range pts {
		c := centres[i%len(centres)]
		pts[i] = point{c.x + r.Float64()*20, c.y + r.Float64()*20, 0.5 + r.Float64()*2}
	}
	truth := func(i, j int) time.Duration {
		d := math.Hypot(pts[i].x-pts[j].x, pts[i].y-pts[j].y) + pts[i].h + pts[j].h
		return time.Duration(d * float64(time.Millisecond))
	}
	nodes := make([]*coords, n)
	names := make([]string, n)
	for i := range nodes {
		c, err := newCoords()
		if err != nil {
			t.Fatal(err)
		}
		nodes[i], names[i] = c, string(rune('a'+i))
	}
	for range 400 {
		for i := range nodes {
			j := r.IntN(n - 1)
			if j >= i {
				j++
			}
			// i pings j; j's ack carries j's coordinate.
			nodes[i].NotifyPingComplete(&memberlist.Node{Name: names[j]}, truth(i, j), nodes[j].AckPayload())
		}
	}
	var errSum float64
	for i := range nodes {
		best, bestTrue := -1, -1
		var bestEst time.Duration
		for j := range nodes {
			if j == i {
				continue
			}
			est, ok := nodes[i].rtt(names[j])
			if !ok {
				t.Fatalf("%s has no coordinate for %s", names[i], names[j])
			}
			errSum += math.Abs(est.Seconds()-truth(i, j).Seconds()) / truth(i, j).Seconds()
			if best < 0 || est < bestEst {
				best, bestEst = j, est
			}
			if bestTrue < 0 || truth(i, j) < truth(i, bestTrue) {
				bestTrue = j
			}
		}
		// Ties within a millisecond are equally near.
		if best != bestTrue && truth(i, best)-truth(i, bestTrue) > time.Millisecond {
			t.Errorf("%s: estimated nearest %s (true %v), truly nearest %s (%v)",
				names[i], names[best], truth(i, best), names[bestTrue], truth(i, bestTrue))
		}
	}
	t.Logf("mean relative RTT error %.1f%%", 100*errSum/float64(n*(n-1)))
}

func TestCoordinateWireRejectsGarbage(t *testing.T) {
	c, _ := newCoords()
	for _, p := range [][]byte{nil, {9}, {coordVersion, 200}, append([]byte{coordVersion, 2}, make([]byte, 10)...)} {
		c.NotifyPingComplete(&memberlist.Node{Name: "x"}, time.Millisecond, p)
	}
	if _, ok := c.rtt("x"); ok {
		t.Fatal("a malformed ack payload was taken")
	}
}
