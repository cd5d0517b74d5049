package engine

// kvCache is the KV cache's blocks. A block is held by the requests that
// reference it; one no request holds is free, and stays in the prefix
// cache (its hash still finds it) until it is allocated for something
// else. Free blocks are allocated least recently freed first, so what
// is evicted is what was used longest ago, as vLLM's free block queue
// does.
type kvCache struct {
	blocks []block
	// The free list, doubly linked through the blocks: head is the next
	// allocated (evicted), tail the last freed.
	head, tail int32
	free       int
	cached     map[uint64]int32 // a full block's hash → the block holding it
	evictions  int64            // cached blocks allocated for something else
}

// block is one KV cache block.
type block struct {
	hash       uint64
	hashed     bool  // hash is set and cached[hash] is this block
	ref        int32 // requests holding it
	prev, next int32 // the free list; -1 at its ends
}

const none = -1

func newKVCache(n int) kvCache {
	c := kvCache{blocks: make([]block, n), head: none, tail: none, cached: map[uint64]int32{}}
	for i := range c.blocks {
		c.blocks[i].prev, c.blocks[i].next = none, none
		c.pushFree(int32(i))
	}
	return c
}

// pushFree appends block id, which no request holds any more, to the free
// list's tail: the last to be evicted.
func (c *kvCache) pushFree(id int32) {
	b := &c.blocks[id]
	b.prev, b.next = c.tail, none
	if c.tail != none {
		c.blocks[c.tail].next = id
	} else {
		c.head = id
	}
	c.tail = id
	c.free++
}

// unlink removes block id from the free list.
func (c *kvCache) unlink(id int32) {
	b := &c.blocks[id]
	if b.prev != none {
		c.blocks[b.prev].next = b.next
	} else {
		c.head = b.next
	}
	if b.next != none {
		c.blocks[b.next].prev = b.prev
	} else {
		c.tail = b.prev
	}
	b.prev, b.next = none, none
	c.free--
}

// prefix returns the blocks holding the longest cached prefix of hashes,
// at most most of them.
func (c *kvCache) prefix(hashes []uint64, most int, out []int32) []int32 {
	for _, h := range hashes[:min(most, len(hashes))] {
		id, ok := c.cached[h]
		if !ok {
			break
		}
		out = append(out, id)
	}
	return out
}

// available is how many blocks could be allocated after taking hits,
// which may be free blocks themselves.
func (c *kvCache) available(hits []int32) int {
	n := c.free
	for _, id := range hits {
		if c.blocks[id].ref == 0 {
			n--
		}
	}
	return n
}

// hold adds a reference to block id, taking it off the free list if it
// was free.
func (c *kvCache) hold(id int32) {
	b := &c.blocks[id]
	if b.ref == 0 {
		c.unlink(id)
	}
	b.ref++
}

// allocate takes the free block at the head of the list, evicting what
// it cached, and holds it. There must be one (see available).
func (c *kvCache) allocate() int32 {
	id := c.head
	c.unlink(id)
	b := &c.blocks[id]
	if b.hashed {
		delete(c.cached, b.hash)
		b.hashed = false
		c.evictions++
	}
	b.ref = 1
	return id
}

// release drops a reference to block id; unheld, it goes to the free
// list's tail, still cached.
func (c *kvCache) release(id int32) {
	b := &c.blocks[id]
	if b.ref--; b.ref == 0 {
		c.pushFree(id)
	}
}

// register caches block id as holding the full block of hash, unless
// another block already does (two requests computed the same block at
// once: the first stays cached, as in vLLM).
func (c *kvCache) register(id int32, hash uint64) {
	b := &c.blocks[id]
	if b.hashed {
		return
	}
	if _, dup := c.cached[hash]; dup {
		return
	}
	b.hash, b.hashed = hash, true
	c.cached[hash] = id
}

// usage is the fraction of blocks held by requests, as vLLM reports
// kv_cache_usage_perc: cached blocks no request holds count as free.
func (c *kvCache) usage() float64 {
	return 1 - float64(c.free)/float64(len(c.blocks))
}
