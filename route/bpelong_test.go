package route

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
)

// mergeLong leaves the same parts as mergeShort, tiktoken-go's way, on
// pieces of every length, from alphabets small enough that many pairs
// merge and many ranks tie.
func TestMergeLongMatchesMergeShort(t *testing.T) {
	enc, err := o200k()
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	alphabets := []string{"a", "ab", "abc ", "0123456789", "aeiou", "xyz!?", "ka", "日本"}
	for i := range 2000 {
		abc := alphabets[i%len(alphabets)]
		var b strings.Builder
		for n := 2 + rng.IntN(600); b.Len() < n; {
			b.WriteByte(abc[rng.IntN(len(abc))])
		}
		piece := b.String()
		short := enc.ranks.mergeShort(piece, make([]part, len(piece)+1))
		long := enc.ranks.mergeLong(piece, make([]part, len(piece)+1))
		starts := func(ps []part) []uint32 {
			s := make([]uint32, len(ps))
			for i, p := range ps {
				s[i] = p.start
			}
			return s
		}
		if !slices.Equal(starts(short), starts(long)) {
			t.Fatalf("%q: mergeShort %v, mergeLong %v", piece, starts(short), starts(long))
		}
	}
}

// A long piece costs about linear time: a 1 MB run of one letter, one
// piece to the pattern, counts in a second or so where the quadratic
// merge would take minutes. The bound is loose (a loaded 2-core machine),
// but far below what the quadratic merge needs for even 100 KB (4 s).
func TestLongPieceIsNotQuadratic(t *testing.T) {
	var tok Tokenizer
	if err := tok.Err(); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	n := tok.Count(strings.Repeat("a", 1<<20))
	if d := time.Since(t0); d > 30*time.Second {
		t.Fatalf("1 MiB of one letter took %v to count", d)
	}
	if n != 1<<20/8 { // "aaaaaaaa" is one token of o200k_base
		t.Fatalf("1 MiB of one letter is %d tokens", n)
	}
}
