package region

import "time"

// Candidate is a node that could relay a request, as seen from the node
// choosing: its estimated round trip and its load.
type Candidate struct {
	Name string
	// RTT is the estimated round trip; RTTKnown is false until
	// coordinates have been exchanged with it.
	RTT      time.Duration
	RTTKnown bool
	// Load is its requests in flight, as it last reported them.
	Load int64
}

// nearSlack is how much farther than the nearest a candidate may be and
// still count as near: nodes of one region are a few milliseconds apart,
// and their load matters more than that.
const (
	nearFactor = 1.2
	nearSlack  = 5 * time.Millisecond
)

// Nearest returns the index of the candidate to relay through, or -1 when
// there is none: among those near the nearest (within 1.2 × its RTT +
// 5 ms), the least loaded; ties go to the earlier candidate. A candidate
// whose RTT is unknown counts as near only when none is known.
func Nearest(cands []Candidate) int {
	best := time.Duration(-1)
	for _, c := range cands {
		if c.RTTKnown && (best < 0 || c.RTT < best) {
			best = c.RTT
		}
	}
	near := func(c Candidate) bool {
		if best < 0 {
			return true
		}
		return c.RTTKnown && c.RTT <= time.Duration(float64(best)*nearFactor)+nearSlack
	}
	pick := -1
	for i, c := range cands {
		if near(c) && (pick < 0 || c.Load < cands[pick].Load) {
			pick = i
		}
	}
	return pick
}
