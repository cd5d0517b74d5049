package route

import (
	"container/heap"
	"encoding/json"
	"fmt"
	"testing"
	"time"
)

// toyEngine is a replica's prefix cache as vLLM keeps one: blocks keyed
// by chained hashes of the prompt's text (its own hashing, knowing
// nothing of sessions or keys), least recently used out beyond its
// capacity; and one prefill at a time, at a fixed rate.
type toyEngine struct {
	capacity int // blocks
	blocks   map[uint64]int64
	clock    int64
	busy     time.Duration // until when it is prefilling
}

const toyPrefillTokensPerSecond = 10000

// serve prefills prompt (its text's block hashes, of tokens) at now and
// returns the tokens found cached and the time to first token.
func (e *toyEngine) serve(blocks []uint64, tokens int, now time.Duration) (int, time.Duration) {
	hit := 0
	for _, b := range blocks {
		if _, ok := e.blocks[b]; !ok {
			break
		}
		hit++
	}
	for _, b := range blocks {
		e.clock++
		e.blocks[b] = e.clock
	}
	for len(e.blocks) > e.capacity { // evict the least recently used
		var lru uint64
		oldest := int64(1 << 62)
		for b, t := range e.blocks {
			if t < oldest {
				lru, oldest = b, t
			}
		}
		delete(e.blocks, lru)
	}
	cached := min(hit*PrefixChunkTokens, tokens)
	start := max(now, e.busy)
	e.busy = start + time.Duration(float64(tokens-cached)/toyPrefillTokensPerSecond*float64(time.Second))
	return cached, e.busy - now
}

// toySession is one conversation: a 4,000-token document and its turns.
type toySession struct {
	id      int
	history []map[string]string
}

func (s *toySession) next(turn int) []byte {
	if len(s.history) == 0 {
		s.history = []map[string]string{{"role": "system", "content": text(fmt.Sprint("document ", s.id), 16000)}}
	}
	s.history = append(s.history, map[string]string{"role": "user", "content": fmt.Sprintf("question %d of session %d?", turn, s.id)})
	b, _ := json.Marshal(map[string]any{"model": "m", "messages": s.history})
	s.history = append(s.history, map[string]string{"role": "assistant", "content": text(fmt.Sprint("answer ", turn), 600)})
	return b
}

// toyEvent is a session's next turn, due at t.
type toyEvent struct {
	t       time.Duration
	session int
}

type toyEvents []toyEvent

func (h toyEvents) Len() int { return len(h) }
func (h toyEvents) Less(i, j int) bool {
	return h[i].t < h[j].t || h[i].t == h[j].t && h[i].session < h[j].session
}
func (h toyEvents) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *toyEvents) Push(x any)   { *h = append(*h, x.(toyEvent)) }
func (h *toyEvents) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}

// simulateReplicas runs 20 sessions of 6 turns each, closed loop (a turn
// is sent 1 to 3.7 s after the previous one's answer ends), over 4 replicas
// under policy, every request planned and admitted by the real planner
// and executor; withSession gives each its X-LLMesh-Session. It returns
// the prompt tokens found cached over those sent, and the mean TTFT.
func simulateReplicas(t *testing.T, policy ReplicaPolicy, withSession bool) (hitRate float64, ttft time.Duration) {
	f := newReplicaFixture(t, policy)
	if f.gpu.Prefix != nil {
		f.gpu.Prefix.Deterministic()
	}
	f.gpu.Ring.Deterministic()
	var now time.Duration
	f.e.now = func() time.Time { return time.Unix(1e9, 0).Add(now) }
	f.now = f.e.now()
	// Each replica caches 250 blocks (32,000 tokens): a quarter of the
	// sessions' documents fit in each, not all of them.
	engines := make([]*toyEngine, 4)
	for i := range engines {
		engines[i] = &toyEngine{capacity: 250, blocks: map[uint64]int64{}}
	}
	sessions := make([]*toySession, 20)
	events := &toyEvents{}
	for i := range sessions {
		sessions[i] = &toySession{id: i}
		heap.Push(events, toyEvent{t: time.Duration(i) * 50 * time.Millisecond, session: i})
	}
	turns := make([]int, len(sessions))
	var cached, sent int
	var ttftSum time.Duration
	type done struct {
		at time.Duration
		tk *Ticket
	}
	var inFlight []done
	for events.Len() > 0 {
		ev := heap.Pop(events).(toyEvent)
		now = ev.t
		f.now = f.e.now()
		kept := inFlight[:0]
		for _, d := range inFlight { // answers ended: their slots free
			if d.at <= now {
				d.tk.Spend(Report{})
			} else {
				kept = append(kept, d)
			}
		}
		inFlight = kept
		s := sessions[ev.session]
		req := chatReq(t, string(s.next(turns[ev.session])))
		if withSession {
			req.Session = fmt.Sprint("conv-", s.id)
		}
		tk, replica := f.send(t, req)
		tk.Seat(req.Session)
		blocks := (&Request{Chat: req.Chat}).Prefix(42).Hashes // the engine's own, unkeyed
		tokens, _ := req.Chat.PromptEstimate()
		hit, first := engines[replica].serve(blocks, tokens, now)

		cached, sent, ttftSum = cached+hit, sent+tokens, ttftSum+first
		end := now + first + 3*time.Second // and its answer's decoding
		inFlight = append(inFlight, done{end, tk})
		if turns[ev.session]++; turns[ev.session] < 6 {
			think := time.Second + time.Duration((7*ev.session+13*turns[ev.session])%10)*300*time.Millisecond
			heap.Push(events, toyEvent{t: end + think, session: ev.session})
		}
	}
	return float64(cached) / float64(sent), ttftSum / time.Duration(20*6)
}

// Closed loop, sessions with long private prefixes: following prefixes
// finds most of each prompt cached, where rotating over the replicas
// makes every replica hold every document and keeps none.
func TestReplicaPrefixHitRate(t *testing.T) {
	rates := map[string]float64{}
	for _, c := range []struct {
		policy  ReplicaPolicy
		session bool
	}{{ReplicaPrefix, false}, {ReplicaPrefix, true}, {ReplicaSession, true}, {ReplicaLeastLoaded, false}, {ReplicaRoundRobin, false}} {
		name := fmt.Sprintf("%s, sessions %v", c.policy, c.session)
		rate, ttft := simulateReplicas(t, c.policy, c.session)
		rates[name] = rate
		t.Logf("%-28s hit rate %5.1f%%, mean TTFT %v", name, 100*rate, ttft.Round(time.Millisecond))
	}
	rr := rates["round_robin, sessions false"]
	for _, name := range []string{"prefix, sessions false", "prefix, sessions true"} {
		if rates[name] < 0.7 || rates[name] < 3*rr {
			t.Errorf("%s: hit rate %.1f%%, round_robin's %.1f%%", name, 100*rates[name], 100*rr)
		}
	}
}
