package route

import "container/heap"

// longPiece is the length beyond which a piece is merged by mergeLong.
// merge's scan for the lowest pair is quadratic: a 100 KB run of one
// letter, one piece to the pattern, took 4 s to count, and the 1 MB a
// count_tokens body may hold would take minutes of a core.
const longPiece = 256

// mergeLong is merge in O(n log n): the pairs wait in a heap ordered by
// rank and then by offset, which pops the pair merge would pick — the
// lowest rank, the leftmost of equals — and the parts are a linked list.
// A pair a merge did away with is passed over when it comes up. parts
// must be len(piece)+1 long; the parts left are written at its start.
func (t *rankTable) mergeLong(piece string, parts []part) []part {
	n := len(piece)
	// next[i] is the offset of the part after the one at i (n at the
	// end) and prev[i] of the one before (-1 at the start); gone marks
	// the offsets that no longer start a part.
	next, prev := make([]int32, n+1), make([]int32, n+1)
	gone := make([]bool, n+1)
	for i := range n + 1 {
		next[i], prev[i] = int32(i+1), int32(i-1)
	}
	h := make(pairHeap, 0, n)
	push := func(start int32) { // the pair of the part at start and the next
		if start < 0 || next[start] >= int32(n) {
			return
		}
		end := next[next[start]]
		if r := t.rank(piece[start:end]); r != noRank {
			heap.Push(&h, pair{rank: r, start: start, end: end})
		}
	}
	for i := range int32(n) {
		push(i)
	}
	for h.Len() > 0 {
		p := heap.Pop(&h).(pair)
		if gone[p.start] || next[p.start] >= int32(n) || next[next[p.start]] != p.end {
			continue // merged away since, or grown into another pair
		}
		m := next[p.start]
		gone[m] = true
		next[p.start] = next[m]
		prev[next[m]] = p.start
		push(prev[p.start])
		push(p.start)
	}
	k := 0
	for i := int32(0); i <= int32(n); i = next[i] {
		parts[k] = part{start: uint32(i), rank: noRank}
		k++
		if i == int32(n) {
			break
		}
	}
	return parts[:k]
}

// pair is two adjacent parts of a piece that form the token of rank
// rank, piece[start:end].
type pair struct {
	rank       uint32
	start, end int32
}

// pairHeap is a min-heap of pairs by rank, then by offset.
type pairHeap []pair

func (h pairHeap) Len() int { return len(h) }
func (h pairHeap) Less(i, j int) bool {
	return h[i].rank < h[j].rank || h[i].rank == h[j].rank && h[i].start < h[j].start
}
func (h pairHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *pairHeap) Push(x any)   { *h = append(*h, x.(pair)) }
func (h *pairHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
