// Package cache is a node's exact-match response cache: the key of a
// request (its tenant, residency, endpoint and model and its body in a
// canonical form, hashed), the bounded in-memory store of whole answers
// and streams' event sequences with a time to live, least recently used
// out, and the recorder that copies an answer on its way to the client
// and replays a stored one. Whether a request may use the cache is the
// node's to decide (node/cachehit.go); this package holds no tenant,
// plan or provider logic. It imports no package of the project.
package cache

import (
	"crypto/sha256"
	"math"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"
)

// Key identifies a cached answer: a SHA-256 over the request's scope and
// canonical body (KeyOf).
type Key [sha256.Size]byte

// Config bounds a Cache.
type Config struct {
	// TTL is how long an answer is served after it was stored.
	TTL time.Duration
	// MaxBytes bounds the bodies and events held, with a small overhead
	// counted per entry; the least recently used go first.
	MaxBytes int64
}

// entryOverhead is what an entry is counted beyond its bodies and
// events: its key, headers and bookkeeping, roughly.
const entryOverhead = 512

// Entry is one stored answer. It is never changed once stored, so a hit
// replays it without holding the cache's lock.
type Entry struct {
	// Header holds the answer's headers worth replaying (its content
	// type and the provider that made it).
	Header http.Header
	// Body is a whole answer; Events a stream's events as the client
	// received them, each ending in a blank line.
	Body   []byte
	Events [][]byte
	// Provider made the answer; Stored is when.
	Provider string
	Stored   time.Time

	expires time.Time
	size    int64
}

// Stream reports whether e is a stream's event sequence.
func (e *Entry) Stream() bool { return e.Events != nil }

// Size is what e counts against Config.MaxBytes.
func (e *Entry) Size() int64 { return e.size }

// Cache is a bounded store of answers by Key, safe for concurrent use.
// Expired entries are dropped when met, or evicted as the least recently
// used.
type Cache struct {
	cfg   Config
	mu    sync.Mutex
	lru   *simplelru.LRU[Key, *Entry]
	bytes int64
	// recording is what the recorders in flight hold (Recorder), bounded
	// by MaxBytes apart from the entries.
	recording atomic.Int64
}

// New returns an empty cache bounded by cfg.
func New(cfg Config) *Cache {
	c := &Cache{cfg: cfg}
	// The store is bounded by bytes, not by count: the count bound is
	// never reached.
	c.lru, _ = simplelru.NewLRU[Key, *Entry](math.MaxInt, func(_ Key, e *Entry) { c.bytes -= e.size })
	return c
}

// MaxEntry is the largest entry stored: a sixteenth of MaxBytes, so that
// one answer never pushes out most of the others. A recorder stops
// copying an answer past it.
func (c *Cache) MaxEntry() int64 { return c.cfg.MaxBytes / 16 }

// Recorder records what is written to s, to store once complete: at
// most MaxEntry bytes of it, and while the recorders in flight together
// hold at most MaxBytes. Past either its copy is dropped (the answer
// passes on, and is not stored). Release gives back what it held.
func (c *Cache) Recorder(s Sink) *Recorder {
	return &Recorder{Sink: s, limit: c.MaxEntry(), pool: c}
}

// take counts n more bytes held by a recorder in flight, unless the
// recorders would hold more than MaxBytes.
func (c *Cache) take(n int64) bool {
	if c.recording.Add(n) > c.cfg.MaxBytes {
		c.recording.Add(-n)
		return false
	}
	return true
}

// Get returns the live entry under k, made the most recently used.
func (c *Cache) Get(k Key, now time.Time) (*Entry, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.lru.Get(k)
	if !ok {
		return nil, false
	}
	if !now.Before(e.expires) {
		c.lru.Remove(k)
		return nil, false
	}
	return e, true
}

// Put stores e under k until now plus the TTL, replacing what k held,
// and evicts the least recently used entries beyond MaxBytes. It reports
// false, storing nothing, for an entry larger than MaxEntry.
func (c *Cache) Put(k Key, e *Entry, now time.Time) bool {
	e.size = entryOverhead + int64(len(e.Body))
	for _, ev := range e.Events {
		e.size += int64(len(ev))
	}
	for name, vs := range e.Header {
		e.size += int64(len(name))
		for _, v := range vs {
			e.size += int64(len(v))
		}
	}
	if e.size > c.MaxEntry() {
		return false
	}
	e.expires = now.Add(c.cfg.TTL)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lru.Remove(k)
	c.lru.Add(k, e)
	c.bytes += e.size
	for c.bytes > c.cfg.MaxBytes {
		c.lru.RemoveOldest()
	}
	return true
}

// Bytes is what the stored entries count against MaxBytes.
func (c *Cache) Bytes() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.bytes
}

// Len is the number of entries stored, expired ones not yet met among
// them.
func (c *Cache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lru.Len()
}
