package des

import (
	"slices"
	"time"

	"github.com/llmesh/llmesh/route"
)

// cut reports whether regions a and b cannot reach each other at t.
func (w *world) cut(a, b string, t time.Duration) bool {
	if a == b {
		return false
	}
	for _, p := range w.s.Partitions {
		if t >= p.Start && t < p.End && slices.Contains(p.Regions, a) != slices.Contains(p.Regions, b) {
			return true
		}
	}
	return false
}

func (w *world) rtt(a, b string) time.Duration {
	if a == b {
		return w.s.RTT.Local
	}
	for _, p := range w.s.RTT.Pairs {
		if p.A == a && p.B == b || p.A == b && p.B == a {
			return p.RTT
		}
	}
	return w.s.RTT.Default
}

// meshView is a node's gossip view: the via node of a region, unless
// gossip has noticed that the region is cut off.
type meshView struct {
	w    *world
	from string
}

func (v meshView) Via(r string, _ route.API) (string, time.Duration, bool) {
	nodes := v.w.byRegion[r]
	if len(nodes) == 0 || v.w.cut(v.from, r, v.w.now-detectAfter) && v.w.cut(v.from, r, v.w.now) {
		return "", 0, false
	}
	return nodes[0].name, v.w.rtt(v.from, r), true
}
