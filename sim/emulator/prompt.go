package emulator

import (
	"slices"
	"sync"

	"github.com/llmesh/llmesh/route"
	"github.com/llmesh/llmesh/sim/engine"
)

// promptBlocks is a prompt as an engine's prefix cache sees it: the
// chained hashes of its full blocks and the token ids after them. The
// zero value caches nothing.
type promptBlocks struct {
	block  int // tokens a block; 0 when there is no engine
	hashes []uint64
	tail   []int
}

func newPromptBlocks(ids []int, block int) promptBlocks {
	full := len(ids) / block * block
	return promptBlocks{block: block, hashes: engine.HashBlocks(ids[:full], block), tail: slices.Clone(ids[full:])}
}

// with returns the hashes of the full blocks of the prompt followed by
// out, the answer's token ids: once generated they are cached too, so
// that the conversation's next turn, which repeats the answer, finds it.
func (p promptBlocks) with(out []int) []uint64 {
	if p.block == 0 {
		return nil
	}
	hashes := slices.Clip(p.hashes)
	var h uint64
	if len(hashes) > 0 {
		h = hashes[len(hashes)-1]
	}
	rest := append(slices.Clip(p.tail), out...)
	for i := 0; i+p.block <= len(rest); i += p.block {
		h = engine.BlockHash(h, rest[i:i+p.block])
		hashes = append(hashes, h)
	}
	return hashes
}

// textCacheMin and textCacheTokens bound the texts whose token ids are
// kept: a system prompt or a conversation's earlier turns come again on
// every turn, and encoding costs about 0.7 µs a token.
const (
	textCacheMin    = 64      // bytes; shorter texts are encoded every time
	textCacheTokens = 1 << 20 // ids kept in all, after which it starts afresh
)

// textTokens remembers the token ids of long texts.
type textTokens struct {
	mu   sync.Mutex
	m    map[string][]int
	size int
}

// encode is the o200k ids of text; the slice is shared, not to be
// modified.
func (e *Emulator) encode(text string) []int {
	if len(text) < textCacheMin {
		return e.tok.Encode(text)
	}
	c := &e.texts
	c.mu.Lock()
	ids, ok := c.m[text]
	c.mu.Unlock()
	if ok {
		return ids
	}
	ids = e.tok.Encode(text)
	c.mu.Lock()
	if c.m == nil || c.size+len(ids) > textCacheTokens {
		c.m, c.size = map[string][]int{}, 0
	}
	c.m[text] = ids
	c.size += len(ids)
	c.mu.Unlock()
	return ids
}

// promptOf is the prompt tokens of a chat of msgs offering tools (a
// tools array as sent, "" when not counted), and with an engine its
// blocks. Tools come first, as a chat template puts them in the system
// prompt, so that a tenant's requests share them as a prefix.
func (x *exchange) promptOf(tools string, msgs []route.Message) (int, promptBlocks) {
	tok := x.e.tok
	if x.eng == nil {
		n := tok.CountMessages(msgs)
		if tools != "" {
			n += tok.Count(tools)
		}
		return n, promptBlocks{}
	}
	var ids []int
	if tools != "" {
		ids = slices.Clone(x.e.encode(tools))
	}
	ids = append(ids, tok.EncodeMessages(msgs, x.e.encode)...)
	return len(ids), newPromptBlocks(ids, x.eng.block())
}

// inputsOf is the prompt tokens of legacy completions' prompts, and with
// an engine their blocks, the prompts one after the other.
func (x *exchange) inputsOf(ps []promptInput) (int, promptBlocks) {
	if x.eng == nil {
		return x.countPrompts(ps), promptBlocks{}
	}
	var ids []int
	for i := range ps {
		if ps[i].isTokens {
			ids = append(ids, ps[i].tokens...)
		} else {
			ids = append(ids, x.e.encode(ps[i].text)...)
		}
	}
	return len(ids), newPromptBlocks(ids, x.eng.block())
}

// wordIDs is the o200k id of each word of the vocabulary, each one token.
func (e *Emulator) wordIDs() *[len(vocabulary)]int {
	e.wordsOnce.Do(func() {
		for i, w := range vocabulary {
			if ids := e.tok.Encode(w); len(ids) == 1 {
				e.words[i] = ids[0]
			}
		}
	})
	return &e.words
}

// answerIDs is the token ids of choice 0 of a chat answer of n tokens
// whose text key is key; nil without an engine.
func (x *exchange) answerIDs(key uint64, n int) []int {
	if x.eng == nil {
		return nil
	}
	words := x.e.wordIDs()
	ids := make([]int, n)
	for i := range ids {
		ids[i] = words[wordIndex(key, 0, i)]
	}
	return ids
}

// piecesIDs is the token ids of generated text, up to a piece a stop
// sequence cut short; nil without an engine.
func (x *exchange) piecesIDs(g *generated) []int {
	if x.eng == nil {
		return nil
	}
	words := x.e.wordIDs()
	ids := make([]int, 0, len(g.pieces))
	for _, p := range g.pieces {
		i := slices.Index(vocabulary[:], p)
		if i < 0 {
			break
		}
		ids = append(ids, words[i])
	}
	return ids
}
