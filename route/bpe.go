package route

import (
	"fmt"
	"iter"
	"unicode/utf8"

	"github.com/dlclark/regexp2"
	"github.com/pkoukk/tiktoken-go-loader/assets"
)

// bpeEncoder encodes text as tiktoken-go does: it splits the text into
// pieces with the encoding's pattern, then encodes each piece that is not
// itself a token by byte pair merges over a rankTable. It gives the same
// tokens as tiktoken-go's EncodeOrdinary (the tests hold it to that) from
// a table a fifth of the size, and counts them without building them.
//
// A bpeEncoder is immutable and safe for concurrent use.
type bpeEncoder struct {
	ranks   *rankTable
	pattern *regexp2.Regexp
}

// newO200kEncoder builds the o200k_base encoder from the ranks embedded in
// the binary by tiktoken-go-loader, read straight from its embedded files.
func newO200kEncoder() (*bpeEncoder, error) {
	ranks, err := loadRankTable(assets.Assets, "o200k_base.tiktoken")
	if err != nil {
		return nil, fmt.Errorf("load o200k_base ranks: %w", err)
	}
	// The pattern needs regexp2: RE2 has no lookahead for \s+(?!\S).
	pattern, err := regexp2.Compile(o200kPattern, regexp2.None)
	if err != nil {
		return nil, fmt.Errorf("compile o200k_base pattern: %w", err)
	}
	return &bpeEncoder{ranks: ranks, pattern: pattern}, nil
}

// count returns the number of tokens of text.
func (e *bpeEncoder) count(text string) int {
	n := 0
	for p := range e.pieces(text) {
		n += e.countPiece(p)
	}
	return n
}

// encode appends the token ids of text to ids.
func (e *bpeEncoder) encode(text string, ids []int) []int {
	for p := range e.pieces(text) {
		ids = e.encodePiece(p, ids)
	}
	return ids
}

// pieces yields the pieces of text the pattern splits it into, exactly as
// tiktoken-go cuts them: regexp2 matches runes, and tiktoken-go cuts its
// pieces from []rune(text), so each invalid UTF-8 byte becomes U+FFFD
// (three bytes) before encoding. Text that is valid UTF-8, nearly all of
// it, is cut in place; other text is first rewritten that way.
func (e *bpeEncoder) pieces(text string) iter.Seq[string] {
	return func(yield func(string) bool) {
		runes := []rune(text)
		if !utf8.ValidString(text) {
			text = string(runes)
		}
		pos, off := 0, 0 // a rune index and its byte offset in text
		// regexp2 fails only on a timeout, and the pattern has none;
		// tiktoken-go too stops at the first failed match.
		m, _ := e.pattern.FindRunesMatch(runes)
		for m != nil {
			for ; pos < m.Index; pos++ {
				off += utf8.RuneLen(runes[pos])
			}
			start := off
			for end := m.Index + m.Length; pos < end; pos++ {
				off += utf8.RuneLen(runes[pos])
			}
			if !yield(text[start:off]) {
				return
			}
			m, _ = e.pattern.FindNextMatch(m)
		}
	}
}

// mergeStack is the longest piece whose merge runs in a buffer on the
// stack; longer pieces, rare in text, allocate theirs.
const mergeStack = 63

// countPiece returns the number of tokens of one piece: one if the piece
// is a token, else what its merges leave.
func (e *bpeEncoder) countPiece(p string) int {
	if len(p) <= 1 {
		return len(p) // every byte is a token
	}
	if e.ranks.rank(p) != noRank {
		return 1
	}
	var buf [mergeStack + 1]part
	parts := buf[:]
	if len(p) > mergeStack {
		parts = make([]part, len(p)+1)
	}
	return len(e.ranks.merge(p, parts[:len(p)+1])) - 1
}

// encodePiece appends the token ids of one piece to ids.
func (e *bpeEncoder) encodePiece(p string, ids []int) []int {
	if r := e.ranks.rank(p); r != noRank {
		return append(ids, int(r))
	}
	if len(p) == 0 {
		return ids
	}
	var buf [mergeStack + 1]part
	parts := buf[:]
	if len(p) > mergeStack {
		parts = make([]part, len(p)+1)
	}
	parts = e.ranks.merge(p, parts[:len(p)+1])
	for i := range len(parts) - 1 {
		ids = append(ids, int(e.ranks.rank(p[parts[i].start:parts[i+1].start])))
	}
	return ids
}

// part is one token of a piece during its merges: the offset where it
// starts and the rank of the token it would form with the next part
// (noRank if none).
type part struct {
	start, rank uint32
}

// merge runs the byte pair merges of piece over parts, which must be
// len(piece)+1 long, and returns the parts left; part i of them is the
// token piece[parts[i].start:parts[i+1].start]. It is tiktoken-go's
// bytePairMerge step for step: it merges the pair of lowest rank, the
// leftmost of equals, until no pair is a token, so its tokens are the
// same. Like it, it costs O(n²) on a piece of n bytes, which a piece of
// text (a word, a number, a run of spaces or punctuation) keeps short;
// a longer one, which a client can send on purpose, goes to mergeLong.
func (t *rankTable) merge(piece string, parts []part) []part {
	if len(piece) > longPiece {
		return t.mergeLong(piece, parts)
	}
	return t.mergeShort(piece, parts)
}

// mergeShort is merge by scanning the parts for the lowest pair at
// every step, as tiktoken-go does: quick on a short piece.
func (t *rankTable) mergeShort(piece string, parts []part) []part {
	for i := range parts {
		parts[i] = part{start: uint32(i), rank: noRank}
	}
	for i := 0; i < len(parts)-2; i++ {
		parts[i].rank = t.pairRank(piece, parts, i, 0)
	}
	for len(parts) > 1 {
		lowest, at := noRank, 0
		for i, p := range parts[:len(parts)-1] {
			if p.rank < lowest {
				lowest, at = p.rank, i
			}
		}
		if lowest == noRank {
			break
		}
		// Merge parts at and at+1: the ranks of the pairs either side
		// of the merged part are now those of three old parts.
		parts[at].rank = t.pairRank(piece, parts, at, 1)
		if at > 0 {
			parts[at-1].rank = t.pairRank(piece, parts, at-1, 1)
		}
		copy(parts[at+1:], parts[at+2:])
		parts = parts[:len(parts)-1]
	}
	return parts
}

// pairRank is the rank of the token spanning parts i to i+skip+1 of
// piece, or noRank if there is no such token or no such parts.
func (t *rankTable) pairRank(piece string, parts []part, i, skip int) uint32 {
	if i+skip+2 >= len(parts) {
		return noRank
	}
	return t.rank(piece[parts[i].start:parts[i+skip+2].start])
}
