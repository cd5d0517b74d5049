package route

import (
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/fstest"

	"github.com/pkoukk/tiktoken-go"
	tiktoken_loader "github.com/pkoukk/tiktoken-go-loader"
)

// bpeCorpus is text of every kind the pattern and the merges treat apart,
// for the differential test and as the fuzz test's seeds.
var bpeCorpus = []string{
	"",
	" ",
	"a",
	"hello world",
	"The quick brown fox jumps over the lazy dog.",
	"It's what they'LL say: we'RE sure he'D've been there, I'M told; 'S alone 't.",
	"DON'T SHOUT, don't whisper. CamelCaseWordsAndHTTPServerError XMLHttpRequest",
	"func (t *rankTable) rank(s string) uint32 {\n\treturn t.slots[i&t.mask]\n}\n",
	"for (int i = 0; i < n; ++i) { a[i] ^= b[i] >> 3; } // bits\n#include <stdio.h>",
	`{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}],"temperature":0.7,"n":null}`,
	"    indented\n\t\ttabs\n\n\n\nblank lines     trailing spaces   \n",
	"line one\r\nline two\r\n\r\nline three\rcarriage\n\r\n",
	"   \t \n \u00a0\u2003\u3000 mixed\u2028spaces\u2029",
	"1 12 123 1234 12345 3.14159 -42 1,000,000 0x1F 1e-9 ٣٤٥ ⅓ ²",
	"café naïve façade résumé Ærøskøbing Straße İstanbul ǅemal",
	"日本語のテキストです。中文文本，还有标点符号！한국어 텍스트입니다.",
	"مرحبا بالعالم، هذا نص عربي. שלום עולם",
	"Здравствуй, мир! Ελληνικά γράμματα. हिन्दी पाठ",
	"emoji 😀🎉👍🏽 👨‍👩‍👧‍👦 flags 🇫🇷🇯🇵 ❤️‍🔥",
	"e\u0301 a\u0308 combining: Z\u0351\u0352\u0353a\u0317l\u0318g\u0319o\u031a \u0301\u0302 alone",
	"invalid \xff\xfe bytes \xc3 cut \xe2\x82 and \xed\xa0\x80 a surrogate, \xf4\x90\x80\x80 too high",
	"\xff",
	"\x00\x01\x1b[31mcontrol\x7f",
	strings.Repeat("a", 1000),
	strings.Repeat("Supercalifragilisticexpialidocious", 30),
	strings.Repeat("ab1", 200) + strings.Repeat("日", 100) + strings.Repeat(" ", 300),
	strings.Repeat("!", 150) + strings.Repeat("\n", 70) + strings.Repeat("-=", 90),
	"<|endoftext|>",
	"before <|endoftext|> after <|endofprompt|> <|fim_prefix|>",
	"https://example.com/path?q=1&r=two#frag user@example.org C:\\Windows\\System32",
	"`code` **bold** _it_ # Heading\n- item\n> quote\n| a | b |\n|---|---|",
}

// o200kTiktoken is tiktoken-go's encoder, built once for all the tests:
// building it takes about 140 ms and keeps 22.5 MB.
var o200kTiktoken = sync.OnceValues(newTiktokenO200k)

// newTiktokenO200k builds tiktoken-go's o200k_base encoder as Tokenizer
// did before the rank table.
func newTiktokenO200k() (*tiktoken.Tiktoken, error) {
	ranks, err := tiktoken_loader.NewOfflineLoader().LoadTiktokenBpe("o200k_base.tiktoken")
	if err != nil {
		return nil, fmt.Errorf("load o200k_base ranks: %w", err)
	}
	special := map[string]int{tiktoken.ENDOFTEXT: 199999, tiktoken.ENDOFPROMPT: 200018}
	bpe, err := tiktoken.NewCoreBPE(ranks, special, o200kPattern)
	if err != nil {
		return nil, fmt.Errorf("build o200k_base encoder: %w", err)
	}
	set := map[string]any{}
	for k := range special {
		set[k] = true
	}
	return tiktoken.NewTiktoken(bpe, &tiktoken.Encoding{
		Name: tiktoken.MODEL_O200K_BASE, PatStr: o200kPattern, MergeableRanks: ranks, SpecialTokens: special,
	}, set), nil
}

// tiktokenO200k returns tiktoken-go's o200k_base encoder, the reference
// the compact encoder is held to.
func tiktokenO200k(tb testing.TB) *tiktoken.Tiktoken {
	tb.Helper()
	enc, err := o200kTiktoken()
	if err != nil {
		tb.Fatal(err)
	}
	return enc
}

// compactO200k returns the encoder Count uses.
func compactO200k(tb testing.TB) *bpeEncoder {
	tb.Helper()
	enc, err := o200k()
	if err != nil {
		tb.Fatal(err)
	}
	return enc
}

// bpeSamples are the benchmark's texts, about 2 KB each, also in the
// differential test's corpus.
func bpeSamples(tb testing.TB) map[string]string {
	tb.Helper()
	samples := map[string]string{}
	for _, name := range []string{"english", "code"} {
		b, err := os.ReadFile("testdata/bpe-" + name + ".txt")
		if err != nil {
			tb.Fatal(err)
		}
		samples[name] = string(b)
	}
	return samples
}

// checkSame fails unless the compact encoder counts and encodes s as
// tiktoken-go encodes it.
func checkSame(t *testing.T, compact *bpeEncoder, ref *tiktoken.Tiktoken, s string) {
	t.Helper()
	want := ref.EncodeOrdinary(s)
	if got := compact.count(s); got != len(want) {
		t.Errorf("count(%.80q) = %d, tiktoken-go %d", s, got, len(want))
	}
	if got := compact.encode(s, nil); !slices.Equal(got, want) {
		t.Errorf("encode(%.80q) = %v, tiktoken-go %v", s, got, want)
	}
}

// The compact encoder gives tiktoken-go's tokens on text of every kind,
// and Count and Encode are its count and its ids.
func TestCompactMatchesTiktoken(t *testing.T) {
	compact, ref := compactO200k(t), tiktokenO200k(t)
	corpus := slices.Clone(bpeCorpus)
	for _, s := range bpeSamples(t) {
		corpus = append(corpus, s)
	}
	for _, s := range corpus {
		checkSame(t, compact, ref, s)
		want := ref.EncodeOrdinary(s)
		if got := (Tokenizer{}).Count(s); got != len(want) {
			t.Errorf("Count(%.80q) = %d, want %d", s, got, len(want))
		}
		if got := (Tokenizer{}).Encode(s); !slices.Equal(got, want) {
			t.Errorf("Encode(%.80q) = %v, want %v", s, got, want)
		}
	}
	if n := compact.ranks.len(); n != 199998 {
		t.Errorf("o200k_base has %d tokens, want 199998", n)
	}
	// Ids known apart from tiktoken-go, so that a reference gone wrong
	// shows too: "hello world" is [24912 2375] in OpenAI's tiktoken, and an
	// invalid byte is U+FFFD's token.
	for s, want := range map[string][]int{"": nil, "hello world": {24912, 2375}, "\xff": {3251}} {
		if got := compact.encode(s, nil); !slices.Equal(got, want) {
			t.Errorf("encode(%q) = %v, want %v", s, got, want)
		}
	}
}

// Every token of the table is found at its own rank, and text that is no
// token is not found.
func TestRankTableLookup(t *testing.T) {
	table := compactO200k(t).ranks
	for r := range uint32(table.len()) {
		if got := table.rank(string(table.token(r))); got != r {
			t.Fatalf("rank(%q) = %d, want %d", table.token(r), got, r)
		}
	}
	for _, s := range []string{"", "<|endoftext|>", strings.Repeat("z", 200), "\xff\xff\xff\xff"} {
		if got := table.rank(s); got != noRank {
			t.Errorf("rank(%q) = %d, want none", s, got)
		}
	}
}

// A rank file that is not one token and its rank a line, dense, in order
// and without repeats is refused rather than misread.
func TestRankTableRefusesMalformedFiles(t *testing.T) {
	for name, text := range map[string]string{
		"empty":        "",
		"no rank":      "YQ==\n",
		"bad rank":     "YQ== x\n",
		"gap":          "YQ== 0\nYg== 2\n",
		"out of order": "Yg== 1\nYQ== 0\n",
		"repeat":       "YQ== 0\nYQ== 1\n",
		"bad base64":   "YQ== 0\n!!!! 1\n",
		"unpadded":     "YQ== 0\nYWJjZA 1\n",
		"all padding":  "==== 0\n",
		"padding only": "YQ== 0\nYWI= 1\n==== 2\n",
		"one =":        "YQ== 0\n= 1\n",
	} {
		fsys := fstest.MapFS{"ranks": {Data: []byte(text)}}
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.Errorf("%s: %q panicked: %v", name, text, r)
				}
			}()
			if _, err := loadRankTable(fsys, "ranks"); err == nil {
				t.Errorf("%s: loaded %q", name, text)
			}
		}()
	}
	fsys := fstest.MapFS{"ranks": {Data: []byte("YQ== 0\n\nYg== 1\nYWI= 2\n")}}
	table, err := loadRankTable(fsys, "ranks")
	if err != nil {
		t.Fatal(err)
	}
	if table.len() != 3 || table.rank("ab") != 2 || table.rank("ba") != noRank {
		t.Errorf("a three-token file read as %d tokens, rank(ab) %d", table.len(), table.rank("ab"))
	}
	if _, err := loadRankTable(fsys, "absent"); err == nil {
		t.Error("an absent file loaded")
	}
}

// FuzzCompactCount holds the compact encoder to tiktoken-go on any text.
func FuzzCompactCount(f *testing.F) {
	for _, s := range bpeCorpus {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		checkSame(t, compactO200k(t), tiktokenO200k(t), s)
	})
}

// liveHeap returns the bytes the heap holds after a collection, and the
// bytes allocated so far.
func liveHeap() (alloc, inuse, total uint64) {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc, m.HeapInuse, m.TotalAlloc
}

// heapOf returns what build's result keeps live on the heap, and all that
// building it allocated (a bound on its transient peak).
func heapOf[T any](build func() (T, error)) (alloc, inuse, total int64, err error) {
	a0, i0, t0 := liveHeap()
	v, err := build()
	a1, i1, t1 := liveHeap()
	runtime.KeepAlive(v)
	return int64(a1 - a0), int64(i1 - i0), int64(t1 - t0), err
}

// The compact encoder keeps a few megabytes live, where tiktoken-go's
// maps keep about 31.
func TestO200kEncoderMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("builds tiktoken-go's encoder")
	}
	alloc, inuse, total, err := heapOf(newO200kEncoder)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("compact:     HeapAlloc +%.1f MB, HeapInuse +%.1f MB, allocated %.1f MB", mb(alloc), mb(inuse), mb(total))
	if alloc > 8<<20 {
		t.Errorf("the compact encoder keeps %.1f MB live, want under 8", mb(alloc))
	}
	rAlloc, rInuse, rTotal, err := heapOf(newTiktokenO200k)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("tiktoken-go: HeapAlloc +%.1f MB, HeapInuse +%.1f MB, allocated %.1f MB", mb(rAlloc), mb(rInuse), mb(rTotal))
}

func mb(n int64) float64 { return float64(n) / (1 << 20) }

// BenchmarkO200kLoad builds each encoder and reports what one keeps live
// (live-MB).
func BenchmarkO200kLoad(b *testing.B) {
	b.Run("compact", func(b *testing.B) { benchmarkLoad(b, newO200kEncoder) })
	b.Run("tiktoken-go", func(b *testing.B) { benchmarkLoad(b, newTiktokenO200k) })
}

func benchmarkLoad[T any](b *testing.B, build func() (T, error)) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := build(); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	alloc, _, _, err := heapOf(build)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(mb(alloc), "live-MB")
}

// BenchmarkCount counts about 2 KB of English and of Go with each encoder.
func BenchmarkCount(b *testing.B) {
	compact, ref := compactO200k(b), tiktokenO200k(b)
	samples := bpeSamples(b)
	for _, name := range []string{"english", "code"} {
		text := samples[name]
		tokens := compact.count(text)
		run := func(count func(string) int) func(*testing.B) {
			return func(b *testing.B) {
				b.ReportAllocs()
				b.SetBytes(int64(len(text)))
				for b.Loop() {
					count(text)
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*tokens), "ns/token")
			}
		}
		b.Run(name+"/compact", run(compact.count))
		b.Run(name+"/tiktoken-go", run(func(s string) int { return len(ref.EncodeOrdinary(s)) }))
	}
}

// BenchmarkRankLookup looks every token up, in the compact table and in
// the map[string]int tiktoken-go-loader builds.
func BenchmarkRankLookup(b *testing.B) {
	table := compactO200k(b).ranks
	keys := make([]string, table.len())
	for r := range keys {
		keys[r] = string(table.token(uint32(r)))
	}
	ranks, err := tiktoken_loader.NewOfflineLoader().LoadTiktokenBpe("o200k_base.tiktoken")
	if err != nil {
		b.Fatal(err)
	}
	b.Run("compact", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			if table.rank(keys[i%len(keys)]) == noRank {
				b.Fatal("a token is missing")
			}
		}
	})
	b.Run("map", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			if _, ok := ranks[keys[i%len(keys)]]; !ok {
				b.Fatal("a token is missing")
			}
		}
	})
}

// BenchmarkRankHash compares hashes for the table on its own keys:
// maphash, which it uses, and FNV-1a.
func BenchmarkRankHash(b *testing.B) {
	table := compactO200k(b).ranks
	keys := make([]string, table.len())
	for r := range keys {
		keys[r] = string(table.token(uint32(r)))
	}
	b.Run("maphash", func(b *testing.B) {
		var sum uint64
		for i := 0; b.Loop(); i++ {
			sum += table.hash(keys[i%len(keys)])
		}
		runtime.KeepAlive(sum)
	})
	b.Run("fnv1a", func(b *testing.B) {
		var sum uint64
		for i := 0; b.Loop(); i++ {
			sum += fnv1a(keys[i%len(keys)])
		}
		runtime.KeepAlive(sum)
	})
}

// fnv1a is the 64-bit FNV-1a hash of s, hash/fnv's without the interface.
func fnv1a(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := range len(s) {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return h
}
