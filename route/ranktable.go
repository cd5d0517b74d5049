package route

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"hash/maphash"
	"io/fs"
	"math/bits"
)

// rankTable holds the mergeable ranks of a BPE encoding in three flat
// arrays instead of Go maps: o200k_base's 200k tokens fit in 4.1 MB (1.4
// of bytes, 0.8 of offsets, 2 of hash table), where tiktoken-go's maps
// and sorted token list keep 22.5 MB live (TestO200kEncoderMemory). It
// answers one question, the rank of a byte string, which is all that
// counting and encoding need; the node never decodes.
//
// A rankTable is immutable once loaded and safe for concurrent use.
type rankTable struct {
	// bytes is every token's bytes, concatenated in rank order.
	bytes []byte
	// offsets bounds the tokens: rank r is bytes[offsets[r]:offsets[r+1]].
	offsets []uint32
	// slots is an open-addressing hash table with linear probing, a power
	// of two long and at most half full. An empty slot is 0; a full one
	// holds rank+1 in its low rankBits bits and the top bits of the key's
	// hash above them, so that a probe rarely compares bytes in vain.
	slots []uint32
	mask  uint64 // len(slots)-1
	seed  maphash.Seed
}

const (
	rankBits = 18 // rank+1 of o200k_base's 199,998 tokens fits in 18 bits
	rankMask = 1<<rankBits - 1
	noRank   = ^uint32(0) // no token: above every rank
)

// errRankTable reports an encoding file that is not one token per line,
// base64 and rank, with ranks 0, 1, 2 … in order and no token twice.
var errRankTable = errors.New("malformed BPE rank file")

// loadRankTable reads a tiktoken rank file (each line a token in base64,
// a space and its rank) from fsys. It reads the file twice as a stream,
// first to size the arrays and then to fill them, so that loading never
// holds more than the table and a read buffer: no copy of the file, no
// map. The ranks must be dense and in order, as OpenAI publishes them.
func loadRankTable(fsys fs.FS, name string) (*rankTable, error) {
	var n, size int
	err := scanRankFile(fsys, name, func(token []byte, _ int) error {
		n++
		size += decodedLen(token)
		return nil
	})
	if err != nil {
		return nil, err
	}
	if n == 0 || n > rankMask || size > 1<<32-1 {
		return nil, fmt.Errorf("%s: %d tokens of %d bytes: %w", name, n, size, errRankTable)
	}
	t := &rankTable{
		bytes:   make([]byte, size),
		offsets: make([]uint32, 1, n+1),
		slots:   make([]uint32, 1<<bits.Len(uint(2*n-1))),
		seed:    maphash.MakeSeed(),
	}
	t.mask = uint64(len(t.slots) - 1)
	off := 0
	err = scanRankFile(fsys, name, func(token []byte, rank int) error {
		r := len(t.offsets) - 1
		if rank != r {
			return fmt.Errorf("%s: rank %d where %d was due: %w", name, rank, r, errRankTable)
		}
		w := decodedLen(token)
		if off+w > len(t.bytes) {
			return fmt.Errorf("%s changed while read: %w", name, errRankTable)
		}
		if got, err := base64.StdEncoding.Decode(t.bytes[off:off+w], token); err != nil || got != w {
			return fmt.Errorf("%s: rank %d: %q is not padded base64: %w", name, rank, token, errRankTable)
		}
		off += w
		t.offsets = append(t.offsets, uint32(off))
		if !t.insert(uint32(r)) {
			return fmt.Errorf("%s: rank %d repeats a token: %w", name, rank, errRankTable)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if off != size || len(t.offsets) != n+1 {
		return nil, fmt.Errorf("%s changed while read: %w", name, errRankTable)
	}
	return t, nil
}

// scanRankFile calls f with each line's base64 token and rank.
func scanRankFile(fsys fs.FS, name string, f func(token []byte, rank int) error) error {
	file, err := fsys.Open(name)
	if err != nil {
		return err
	}
	defer file.Close()
	sc := bufio.NewScanner(file)
	for line := 1; sc.Scan(); line++ {
		b := sc.Bytes()
		if len(b) == 0 {
			continue
		}
		token, digits, ok := bytes.Cut(b, []byte{' '})
		rank, okRank := plainInt(digits)
		okRank = okRank && digits[0] != '-'
		// Padded base64 is whole quanta of four with at most two '=':
		// anything else would size a token wrong (all padding, negative).
		if !ok || !okRank || len(token) == 0 || len(token)%4 != 0 || bytes.HasSuffix(token, []byte("===")) {
			return fmt.Errorf("%s:%d: %q: %w", name, line, b, errRankTable)
		}
		if err := f(token, rank); err != nil {
			return err
		}
	}
	return sc.Err()
}

// decodedLen is the length of the bytes a padded base64 token decodes to.
func decodedLen(token []byte) int {
	n := len(token) / 4 * 3
	for i := len(token) - 1; i >= 0 && token[i] == '='; i-- {
		n--
	}
	return n
}

// hash hashes a key; maphash is the runtime's own string hash, which
// measured faster than FNV-1a on o200k's short keys (BenchmarkRankHash).
func (t *rankTable) hash(s string) uint64 { return maphash.String(t.seed, s) }

// hashBytes is hash of a key in a []byte, without converting it.
func (t *rankTable) hashBytes(b []byte) uint64 { return maphash.Bytes(t.seed, b) }

// token is the bytes of rank r.
func (t *rankTable) token(r uint32) []byte { return t.bytes[t.offsets[r]:t.offsets[r+1]] }

// insert adds rank r, whose bytes are in place, to the hash table, and
// reports false if its bytes are already there under another rank.
func (t *rankTable) insert(r uint32) bool {
	key := t.token(r)
	h := t.hashBytes(key)
	tag := uint32(h>>(64-(32-rankBits))) << rankBits
	for i := h & t.mask; ; i = (i + 1) & t.mask {
		e := t.slots[i]
		if e == 0 {
			t.slots[i] = tag | (r + 1)
			return true
		}
		if e&^rankMask == tag && bytes.Equal(t.token(e&rankMask-1), key) {
			return false
		}
	}
}

// rank returns the rank of the token whose bytes are s, or noRank.
func (t *rankTable) rank(s string) uint32 {
	h := t.hash(s)
	tag := uint32(h>>(64-(32-rankBits))) << rankBits
	for i := h & t.mask; ; i = (i + 1) & t.mask {
		e := t.slots[i]
		if e == 0 {
			return noRank
		}
		if e&^rankMask == tag {
			if r := e&rankMask - 1; string(t.token(r)) == s {
				return r
			}
		}
	}
}

// len is the number of tokens.
func (t *rankTable) len() int { return len(t.offsets) - 1 }
