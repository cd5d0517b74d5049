package emulator

import (
	"hash/maphash"
	"sync"
)

// bodyCacheSize bounds the bodies remembered.
const bodyCacheSize = 1024

// analysis is what the emulator works out from a valid request body beyond
// ParseChatRequest: its prompt tokens and the tool call to answer with.
type analysis struct {
	prompt     int
	call       *toolCall // nil: answer in text; shared, never modified
	callTokens int       // of call.args
	frags      []string  // call.args as streamed; shared, never modified
	// answersTool: the last message is a tool's result, which the model
	// answers in a short text that ends by itself.
	answersTool bool
	blocks      promptBlocks // the prompt's, when an engine serves it
}

// bodyCache remembers the analysis of recent request bodies. Counting
// tokens costs about 0.7 µs a token, and benchmarks send the same bodies over
// and over; an identical body has the same messages and tools.
type bodyCache struct {
	seed maphash.Seed
	mu   sync.Mutex
	m    map[uint64]analysis
}

func (c *bodyCache) get(body []byte) (uint64, analysis, bool) {
	key := maphash.Bytes(c.seed, body)
	c.mu.Lock()
	a, ok := c.m[key]
	c.mu.Unlock()
	return key, a, ok
}

func (c *bodyCache) put(key uint64, a analysis) {
	c.mu.Lock()
	if c.m == nil || len(c.m) >= bodyCacheSize {
		c.m = make(map[uint64]analysis, bodyCacheSize) // start afresh rather than track recency
	}
	c.m[key] = a
	c.mu.Unlock()
}
