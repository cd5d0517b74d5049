package route

import "github.com/cespare/xxhash/v2"

// Prompt prefixes are hashed in chunks of PrefixChunk bytes of the
// rendered prompt (the text the model reads, in the order it reads it),
// each hash chained over everything before it, as vLLM hashes its KV
// cache blocks: two prompts share their first k hashes exactly when they
// share their first k chunks, so the longest run of a request's hashes a
// replica was sent is the prefix its cache is expected to hold.
const (
	// PrefixChunk is 512 bytes: about 128 tokens at the four bytes a
	// token the estimate assumes, eight of vLLM's default 16-token
	// blocks. The tail short of a chunk, which goes unseen, is then worth
	// a few milliseconds of prefill at most, while a 32K-token prompt is
	// still only 256 hashes to look up and record.
	PrefixChunk = 512
	// PrefixChunkTokens is the prompt tokens a chunk is taken to hold.
	PrefixChunkTokens = PrefixChunk / 4
	// MaxPrefixChunks bounds the chunks hashed of one prompt (256 KiB,
	// about 64K tokens): what lies beyond is rarely what tells replicas
	// apart, and it bounds the index entries one request touches.
	MaxPrefixChunks = 512
)

// PromptPrefix is a request's prompt prefix as chained chunk hashes.
// When the request has a key (prompt_cache_key, else its session), the
// key is a synthetic first chunk and every text chunk chains from it: the
// requests of one key land together before anything of their text is
// known, and are told apart from other keys' requests with the same text.
type PromptPrefix struct {
	// Hashes[k] covers the key (when Keyed) and the chunks before k's
	// end; never 0.
	Hashes []uint64
	// Keyed means Hashes[0] is the key's.
	Keyed bool
	seed  uint64
	done  bool
}

// Text returns the number of Hashes that are text chunks.
func (p *PromptPrefix) Text() int {
	if p.Keyed {
		return len(p.Hashes) - 1
	}
	return len(p.Hashes)
}

// CachedTokens is the prompt tokens a replica holding the first held of
// Hashes is expected to have cached, for a prompt of prompt tokens. A
// keyed prompt shorter than a chunk is known by its key alone: a replica
// that was sent the key is taken to hold all of it, as it holds the
// earlier turns of a conversation.
func (p *PromptPrefix) CachedTokens(held, prompt int) int {
	if held <= 0 {
		return 0
	}
	if p.Keyed {
		if len(p.Hashes) == 1 {
			return prompt
		}
		held--
	}
	return min(held*PrefixChunkTokens, prompt)
}

// Prefix returns the request's prompt prefix hashed with seed (the
// provider's PrefixIndex's), computing it on first use: a request is
// hashed only when it is planned for a provider with replicas. It
// allocates the hashes once, never per chunk. Like the rest of a Request
// it is not safe for concurrent use.
func (r *Request) Prefix(seed uint64) *PromptPrefix {
	p := &r.prefix
	if p.done && p.seed == seed {
		return p
	}
	chat := r.Chat
	if chat == nil {
		chat = &ChatRequest{API: APIEmbeddings} // nothing to render
	}
	key := chat.CacheKey
	if key == "" {
		key = r.Session
	}
	// A sizing pass first, so that the hashes are one allocation.
	w := prefixWriter{count: true}
	chat.renderPrompt(&w)
	n := min(w.n/PrefixChunk, MaxPrefixChunks)
	if key != "" {
		n++
	}
	// Fresh hashes, never the old ones' array: a copy of the request
	// may share it.
	w = prefixWriter{out: make([]uint64, 0, n)}
	w.d.ResetWithSeed(seed)
	if key != "" {
		w.d.WriteString("\x00key\x00")
		w.d.WriteString(key)
		w.out = append(w.out, nonzero(w.d.Sum64()))
	}
	if n > len(w.out) {
		chat.renderPrompt(&w)
	}
	*p = PromptPrefix{Hashes: w.out, Keyed: key != "", seed: seed, done: true}
	return p
}

// renderPrompt writes what the model reads first, in order: the tools
// (templates render them in the system part), then a chat's messages,
// field by field; a Responses request's instructions and input items
// after the conversation a bridged follow-up continues; a legacy
// completion's prompt as given. Embeddings have no prefix to follow:
// pooling models keep no prefix cache.
func (r *ChatRequest) renderPrompt(w *prefixWriter) {
	if r.API == APIEmbeddings {
		return
	}
	var prompt []byte
	for _, m := range r.members {
		switch m.key {
		case "tools":
			w.bytes(r.raw[m.vstart:m.vend])
			w.str("\x1d")
		case "prompt":
			prompt = r.raw[m.vstart:m.vend]
		}
	}
	switch r.API {
	case APICompletions:
		w.bytes(prompt)
		return
	case APIResponses:
		if r.Prior != nil {
			w.bytes(r.Prior.Conversation)
		}
		for _, s := range r.inputs {
			w.str(s)
			w.str("\x1e")
		}
		return
	}
	for i := range r.Messages {
		m := &r.Messages[i]
		w.str(m.Role)
		w.str("\x1f")
		w.str(m.Name)
		w.str("\x1f")
		if m.Content.Parts == nil {
			w.str(m.Content.Text)
		}
		for _, p := range m.Content.Parts {
			w.str(p.Type)
			w.str("\x1f")
			w.str(p.Text)
			w.str(p.Refusal)
			w.str("\x1f")
		}
		for _, tc := range m.ToolCalls {
			w.str(tc.Function.Name)
			w.str("\x1f")
			w.str(tc.Function.Arguments)
			w.str("\x1f")
		}
		w.str(m.ToolCallID)
		w.str("\x1e")
	}
}

// prefixWriter hashes a rendered prompt into chained chunk hashes as it
// is written, until out is full; with count it only counts the bytes.
type prefixWriter struct {
	count bool
	n     int // bytes written (count)
	fill  int // bytes of the chunk under way
	d     xxhash.Digest
	out   []uint64
}

func (w *prefixWriter) str(s string) {
	if w.count {
		w.n += len(s)
		return
	}
	for len(s) > 0 && len(w.out) < cap(w.out) {
		k := min(len(s), PrefixChunk-w.fill)
		w.d.WriteString(s[:k])
		s = s[k:]
		w.chunkEnd(k)
	}
}

func (w *prefixWriter) bytes(b []byte) {
	if w.count {
		w.n += len(b)
		return
	}
	for len(b) > 0 && len(w.out) < cap(w.out) {
		k := min(len(b), PrefixChunk-w.fill)
		w.d.Write(b[:k])
		b = b[k:]
		w.chunkEnd(k)
	}
}

// chunkEnd counts k more bytes of the chunk and, when it is whole, adds
// the hash of everything so far.
func (w *prefixWriter) chunkEnd(k int) {
	if w.fill += k; w.fill == PrefixChunk {
		w.out = append(w.out, nonzero(w.d.Sum64()))
		w.fill = 0
	}
}

// nonzero keeps 0 free to mark an empty slot of the index.
func nonzero(h uint64) uint64 {
	if h == 0 {
		return 1
	}
	return h
}
