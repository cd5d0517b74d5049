package des

import (
	"time"

	"github.com/llmesh/llmesh/route"
	"github.com/llmesh/llmesh/sim/engine"
)

// EngineSpec makes a provider's replicas inference engines (sim/engine)
// instead of a log-normal TTFT and a token rate: a request queues for a
// place in the batch and KV cache blocks, its first token comes once its
// prompt tokens not found in the replica's prefix cache are computed,
// and the others at the engine's steps, slower the fuller its batch.
// Preset names a preset (engine.PresetNames: llama-3.1-8b-h100,
// llama-3.1-70b-4xh100); the other fields, when not 0, override it.
type EngineSpec struct {
	Preset                 string        `yaml:"preset"`
	MaxRunning             int           `yaml:"max_running"`
	MaxBatchedTokens       int           `yaml:"max_batched_tokens"`
	KVBlocks               int           `yaml:"kv_blocks"`
	BlockTokens            int           `yaml:"block_tokens"`
	PrefillTokensPerSecond float64       `yaml:"prefill_tokens_per_second"`
	DecodeBase             time.Duration `yaml:"decode_base"`
	DecodePerSeq           time.Duration `yaml:"decode_per_seq"`
}

// config is the engine's configuration: the preset, overridden.
func (e *EngineSpec) config(field string) (engine.Config, error) {
	var c engine.Config
	if e.Preset != "" {
		var ok bool
		if c, ok = engine.Preset(e.Preset); !ok {
			return c, bad(field+".preset", "%q is not a preset (have %v)", e.Preset, engine.PresetNames())
		}
	}
	over := func(dst *int, v int) {
		if v != 0 {
			*dst = v
		}
	}
	over(&c.MaxRunning, e.MaxRunning)
	over(&c.MaxBatchedTokens, e.MaxBatchedTokens)
	over(&c.KVBlocks, e.KVBlocks)
	over(&c.BlockTokens, e.BlockTokens)
	if e.PrefillTokensPerSecond != 0 {
		c.PrefillTokensPerSecond = e.PrefillTokensPerSecond
	}
	if e.DecodeBase != 0 {
		c.DecodeBase = e.DecodeBase
	}
	if e.DecodePerSeq != 0 {
		c.DecodePerSeq = e.DecodePerSeq
	}
	if err := c.Validate(); err != nil {
		return c, bad(field, "%v", err)
	}
	return c, nil
}

// simReplica is one engine replica of a provider and the calls in it.
type simReplica struct {
	rep   *engine.Replica
	calls map[uint64]*engineCall // by request id
}

// engineCall is a request in an engine, until its last token.
type engineCall struct {
	tk     *route.Ticket
	stream bool
	start  time.Duration // when its node sent it
	ttft   time.Duration
	used   route.Usage
}

// buildEngines makes the engine replicas of the providers that have an
// engine: one per replica (one without replicas), each stretching its
// steps as long as nothing joins its batch.
func (w *world) buildEngines() error {
	for i := range w.s.Providers {
		p := &w.s.Providers[i]
		if p.Engine == nil {
			continue
		}
		cfg, err := p.Engine.config("providers[" + p.Name + "].engine")
		if err != nil {
			return err
		}
		for range max(1, p.Replicas) {
			eng, err := engine.New(cfg)
			if err != nil {
				return err
			}
			sr := &simReplica{calls: map[uint64]*engineCall{}}
			sr.rep = engine.NewReplica(eng, 1<<20, w.at, func(t time.Duration, ev engine.Event) { w.engineEvent(sr, t, ev) })
			w.engines[p.Name] = append(w.engines[p.Name], sr)
		}
	}
	return nil
}

// tryEngine makes attempt a of r on t, admitted with ticket tk, at a
// provider whose replicas are engines: the request reaches the replica
// after the hop and is answered when the engine has generated its last
// token. One that could never fit the replica's KV cache is refused as
// a failed call.
func (r *simRequest) tryEngine(t *route.Target, tk *route.Ticket, hop time.Duration, spec *ProviderSpec) verdict {
	w := r.w
	replica := 0
	if t.Offer.Provider.Ring != nil {
		replica = t.Replica
	}
	sr := w.engines[t.Provider()][replica]
	cfg := sr.rep.Engine().Config()
	if (r.prompt+r.completion+cfg.BlockTokens-1)/cfg.BlockTokens > cfg.KVBlocks {
		w.elapsed += hop + failFast
		tk.Settle(route.Report{Outcome: route.OutcomeHTTPError})
		return next
	}
	tk.Seat(r.s.key)
	if t.Offer.Provider.Ring == nil {
		replica = -1
	}
	w.answered(r.s, r.turn, t.Provider(), replica, spec, t.Offer.Model.Cost(route.Usage{PromptTokens: r.prompt, CompletionTokens: r.completion}), r.req.Residency)
	req := engine.Request{ID: r.id, Prompt: r.prompt, Output: r.completion, Blocks: w.engineBlocks(r.s, r.prompt+r.completion, cfg.BlockTokens)}
	sr.calls[r.id] = &engineCall{tk: tk, stream: r.s.stream, start: w.now,
		used: route.Usage{PromptTokens: r.prompt, CompletionTokens: r.completion}}
	w.at(w.now+w.elapsed+hop, func() {
		if err := sr.rep.Add(w.now, req); err != nil {
			panic("des: " + err.Error()) // fits (checked above), and ids are unique
		}
	})
	return answered
}

// engineEvent records a request's progress in an engine replica: its
// time to first token, and once done its latency, the tracker's report
// and the ticket's spend.
func (w *world) engineEvent(sr *simReplica, t time.Duration, ev engine.Event) {
	c := sr.calls[ev.ID]
	if ev.First {
		c.ttft = t - c.start
	}
	if !ev.Done {
		return
	}
	delete(sr.calls, ev.ID)
	total := t - c.start
	w.timed(c.stream, c.ttft, total)
	c.tk.Report(route.Report{Outcome: route.OutcomeOK, TTFT: c.ttft, Total: total})
	c.tk.Spend(route.Report{Answered: true, Known: true, Usage: c.used})
}

// engineBlocks is the chained hashes of the full blocks of a request of
// tokens (prompt and answer), as a replica's prefix cache sees them. A
// session's tokens are, by position, its tenant's system prompt
// (Workload.SharedPrefixTokens of them), then its conversation: two
// turns of a session share the shorter one's tokens, and an answer's
// tokens are the next turn's history. The chains are kept, the tenant's
// for the run and the session's while it lasts, so that a turn hashes
// only blocks no earlier turn had.
func (w *world) engineBlocks(s *session, tokens, block int) []uint64 {
	n := tokens / block
	if s.blocks.block == 0 {
		s.blocks.block = block
	}
	if s.blocks.block != block { // replicas of another block size: not kept
		c := blockChain{block: block}
		w.extend(&c, s, n)
		return c.hashes
	}
	w.extend(&s.blocks, s, n)
	return s.blocks.hashes[:n]
}

// blockChain is a chain of block hashes of one block size.
type blockChain struct {
	block  int
	hashes []uint64
}

// extend hashes c up to n blocks of session s: the tenant's shared ones
// from the tenant's own chain, then the session's.
func (w *world) extend(c *blockChain, s *session, n int) {
	shared := w.s.Workload.SharedPrefixTokens / c.block
	for k := len(c.hashes); k < n; k++ {
		if k < shared {
			t := w.tenantChain(s.tenant, c.block)
			for len(t.hashes) <= k {
				t.hashes = append(t.hashes, chainNext(t.hashes, s.tenant.id))
			}
			c.hashes = append(c.hashes, t.hashes[k])
			continue
		}
		c.hashes = append(c.hashes, chainNext(c.hashes, s.id))
	}
}

// tenantChain is the chain of tenant's shared prefix in blocks of block
// tokens.
func (w *world) tenantChain(t *TenantSpec, block int) *blockChain {
	key := tenantBlock{t.Name, block}
	c := w.tenantChains[key]
	if c == nil {
		c = &blockChain{block: block}
		w.tenantChains[key] = c
	}
	return c
}

type tenantBlock struct {
	tenant string
	block  int
}

// chainNext is the hash of block len(chain) of owner's tokens after chain.
func chainNext(chain []uint64, owner uint64) uint64 {
	var parent uint64
	if len(chain) > 0 {
		parent = chain[len(chain)-1]
	}
	ids := [3]int{int(owner & 0x7fffffff), int(owner >> 31 & 0x7fffffff), len(chain)}
	return engine.BlockHash(parent, ids[:])
}

// prefixHitRate is the prompt tokens the engines found cached over those
// they looked up; 0 without engines.
func (w *world) prefixHitRate() float64 {
	var queries, hits int64
	for _, p := range w.s.Providers {
		for _, sr := range w.engines[p.Name] {
			st := sr.rep.Engine().Stats()
			queries += st.PrefixQueries
			hits += st.PrefixHits
		}
	}
	if queries == 0 {
		return 0
	}
	return round6(float64(hits) / float64(queries))
}
