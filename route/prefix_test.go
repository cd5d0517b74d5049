package route

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

// chatBody is a chat request of a system prompt and user turns.
func chatBody(t testing.TB, extra string, system string, turns ...string) *Request {
	t.Helper()
	msgs := []map[string]string{{"role": "system", "content": system}}
	for _, u := range turns {
		msgs = append(msgs, map[string]string{"role": "user", "content": u})
	}
	b, err := json.Marshal(map[string]any{"model": "m", "messages": msgs})
	if err != nil {
		t.Fatal(err)
	}
	if extra != "" {
		b = append(append(b[:len(b)-1], ','), extra+"}"...)
	}
	return chatReq(t, string(b))
}

// text is n bytes of varied text, the same for the same seed.
func text(seed string, n int) string {
	var b strings.Builder
	for i := 0; b.Len() < n; i++ {
		b.WriteString(seed)
		b.WriteByte(' ')
		b.WriteString(strings.Repeat("lorem ipsum ", i%7+1))
	}
	return b.String()[:n]
}

// Two prompts sharing their start share the hashes of the chunks within
// it and no others; a byte changed in chunk k changes every hash from k
// on and none before.
func TestPrefixChainsChunks(t *testing.T) {
	system := text("system", 5*PrefixChunk-20)
	a := chatBody(t, "", system, "first question").Prefix(1)
	b := chatBody(t, "", system, "another question, longer than the first").Prefix(1)
	if a.Keyed || len(a.Hashes) != 5 || len(b.Hashes) != 5 {
		t.Fatalf("want 5 unkeyed chunks each, got %d and %d (keyed %v)", len(a.Hashes), len(b.Hashes), a.Keyed)
	}
	// The fifth chunk ends in the user turn.
	if !slices.Equal(a.Hashes[:4], b.Hashes[:4]) || a.Hashes[4] == b.Hashes[4] {
		t.Errorf("shared start: %x vs %x", a.Hashes, b.Hashes)
	}
	for k := range 5 {
		changed := []byte(system)
		changed[k*PrefixChunk+50] ^= 1
		c := chatBody(t, "", string(changed), "first question").Prefix(1)
		for j := range 5 {
			if same := c.Hashes[j] == a.Hashes[j]; same != (j < k) {
				t.Errorf("byte changed in chunk %d: hash %d same=%v", k, j, same)
			}
		}
	}
	if d := chatBody(t, "", system, "first question").Prefix(2); d.Hashes[0] == a.Hashes[0] {
		t.Error("another seed, the same hashes")
	}
	if short := chatBody(t, "", "You are terse.", "hi").Prefix(1); len(short.Hashes) != 0 {
		t.Errorf("a prompt shorter than a chunk has %d hashes", len(short.Hashes))
	}
}

// A key (prompt_cache_key, else the session) is a synthetic first chunk
// the text chains from: one key's requests share it whatever their text,
// and the same text under two keys shares nothing.
func TestPrefixKey(t *testing.T) {
	system := text("system", 3*PrefixChunk)
	k1 := chatBody(t, `"prompt_cache_key":"k1"`, system, "q").Prefix(1)
	k1other := chatBody(t, `"prompt_cache_key":"k1"`, "short", "q").Prefix(1)
	k2 := chatBody(t, `"prompt_cache_key":"k2"`, system, "q").Prefix(1)
	if !k1.Keyed || len(k1.Hashes) != 4 || k1.Text() != 3 || len(k1other.Hashes) != 1 {
		t.Fatalf("keyed: %d hashes, %d of text; short: %d", len(k1.Hashes), k1.Text(), len(k1other.Hashes))
	}
	if k1.Hashes[0] != k1other.Hashes[0] {
		t.Error("one key, two first hashes")
	}
	for j := range k1.Hashes {
		if k1.Hashes[j] == k2.Hashes[j] {
			t.Errorf("keys k1 and k2 share hash %d", j)
		}
	}
	// The session is the key when there is no prompt_cache_key.
	s := chatBody(t, "", system, "q")
	s.Session = "conv-7"
	if p := s.Prefix(1); !p.Keyed || p.Hashes[0] == k1.Hashes[0] {
		t.Errorf("a session's prefix: keyed %v", p.Keyed)
	}
	if got := k1other.CachedTokens(1, 100); got != 100 {
		t.Errorf("a short keyed prompt whose key is held: %d cached tokens, want all 100", got)
	}
	if got := k1.CachedTokens(3, 1000); got != 2*PrefixChunkTokens {
		t.Errorf("key and two chunks held: %d cached tokens", got)
	}
}

// Each API's prompt is what is hashed: a Responses request's
// instructions first wherever the body puts them, a legacy completion's
// prompt, and no embeddings input.
func TestPrefixOfEachAPI(t *testing.T) {
	long := text("doc", 2*PrefixChunk)
	q, _ := json.Marshal(long)
	r1, err := ParseResponsesRequest([]byte(`{"model":"m","instructions":` + string(q) + `,"input":"a"}`))
	if err != nil {
		t.Fatal(err)
	}
	r2, _ := ParseResponsesRequest([]byte(`{"model":"m","input":"b","instructions":` + string(q) + `}`))
	p1, p2 := (&Request{Chat: r1}).Prefix(1), (&Request{Chat: r2}).Prefix(1)
	if len(p1.Hashes) != 2 || !slices.Equal(p1.Hashes, p2.Hashes) {
		t.Errorf("responses: %x vs %x", p1.Hashes, p2.Hashes)
	}
	c, _ := ParseCompletionsRequest([]byte(`{"model":"m","prompt":` + string(q) + `}`))
	if p := (&Request{Chat: c}).Prefix(1); len(p.Hashes) != 2 {
		t.Errorf("completions: %d hashes", len(p.Hashes))
	}
	e, _ := ParseEmbeddingsRequest([]byte(`{"model":"m","input":` + string(q) + `}`))
	if p := (&Request{Chat: e}).Prefix(1); len(p.Hashes) != 0 {
		t.Errorf("embeddings: %d hashes", len(p.Hashes))
	}
}

// Hashing is one allocation per request, bounded in chunks, and done
// once per seed.
func TestPrefixAllocatesOnce(t *testing.T) {
	req := chatBody(t, `"prompt_cache_key":"k"`, text("x", 40*PrefixChunk), "q")
	if a := testing.AllocsPerRun(50, func() { req.prefix = PromptPrefix{}; req.Prefix(1) }); a > 1 {
		t.Errorf("hashing allocates %.0f times", a)
	}
	first := &req.Prefix(1).Hashes[0]
	if req.Prefix(1); first != &req.Prefix(1).Hashes[0] {
		t.Error("hashed again")
	}
	huge := chatBody(t, "", text("y", (MaxPrefixChunks+50)*PrefixChunk), "q")
	if n := len(huge.Prefix(1).Hashes); n != MaxPrefixChunks {
		t.Errorf("%d hashes of a huge prompt, want %d", n, MaxPrefixChunks)
	}
}

func BenchmarkPrefix(b *testing.B) {
	req := chatBody(b, "", text("x", 32*1024), "q") // about 8K tokens
	b.SetBytes(32 * 1024)
	b.ReportAllocs()
	for b.Loop() {
		req.prefix = PromptPrefix{}
		req.Prefix(1)
	}
}
