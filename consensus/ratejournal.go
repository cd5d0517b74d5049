package consensus

// A rate holder's journal: what a node keeps on disk so that, restarted
// after a crash, it knows what it sent each limited provider (and under
// each key's and tenant's limit) in the last window, and goes on as the
// same holder instead of leaving a ghost share behind for a lease and a
// window.
//
// As with escrow (budgetjournal.go), the request path writes nothing: a
// share counts what it took, and takes nothing past a ceiling the
// journal has made durable, a few flushes of its recent sending ahead.
// After a crash, the node counts what its journal recorded as sent when
// it was recorded, and whatever more the ceilings allowed as sent when
// it restarts.

import (
	"math"
	"slices"
	"time"
)

// journalWait is how long a take refused for want of a journal record
// waits: the record is written at once.
const journalWait = 10 * time.Millisecond

// RateJournalShare is one share's part of a journal record.
type RateJournalShare struct {
	Name string `json:"name"`
	// At is when the record was made (Unix ns); Sent and Tokens what was
	// taken since the share's previous record, counted as sent at At.
	At     int64   `json:"at"`
	Sent   int64   `json:"sent,omitempty"`
	Tokens float64 `json:"tokens,omitempty"`
	// Taken and TokTaken are what was taken in all; CeilReq and CeilTok
	// the most that may be, cumulative.
	Taken    int64   `json:"taken"`
	TokTaken float64 `json:"tok_taken"`
	CeilReq  int64   `json:"ceil_req"`
	CeilTok  float64 `json:"ceil_tok"`
}

// RateJournal is a rate holder's part of a journal record.
type RateJournal struct {
	// Seq is the holder's last renewal number (ReportUsage).
	Seq    uint64             `json:"seq,omitempty"`
	Shares []RateJournalShare `json:"shares,omitempty"`
}

// EnableJournal makes the holder take only within the ceilings its
// journal has made durable (Journal); kick is called, and must not
// block, when a take waits for the next record. Call it before Run.
func (h *RateHolder) EnableJournal(kick func()) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.journalKick = kick
}

// overCeilingLocked reports whether name's share s may not take one
// request and tokens more within its journal's ceilings: only the
// dimensions name has a limit in count.
func (h *RateHolder) overCeilingLocked(name string, s *rateShare, tokens int) bool {
	if h.journalKick == nil || s.unlimited {
		return false
	}
	c := h.caps[name]
	return c[0] > 0 && s.taken+1 > s.ceilReq || c[1] > 0 && s.tokTaken+float64(tokens) > s.ceilTok
}

// underCeilingLocked reports whether name's share s may take one request
// and tokens more within its journal's ceilings; when not, the journal is
// asked for a record at once.
func (h *RateHolder) underCeilingLocked(name string, s *rateShare, tokens int) bool {
	if !h.overCeilingLocked(name, s, tokens) {
		return true
	}
	s.maxTok = max(s.maxTok, float64(tokens)) // the next ceiling makes room for it
	h.journalKick()
	return false
}

// Journal returns the holder's part of the next journal record (every
// limited share when full, else those that took since the last record or
// need a higher ceiling) and commit, to call once the record is durable:
// it lets the shares take up to the ceilings the record holds.
func (h *RateHolder) Journal(full bool, now time.Time) (RateJournal, func()) {
	h.mu.Lock()
	defer h.mu.Unlock()
	j := RateJournal{Seq: h.seq}
	type raise struct {
		s        *rateShare
		req      int64
		tok      float64
		taken    int64
		tokTaken float64
	}
	var raises []raise
	for _, name := range sortedKeys(h.shares) {
		s := h.shares[name]
		if s.unlimited {
			continue
		}
		sent, toks := s.taken-s.lastTaken, s.tokTaken-s.lastTok
		// Ahead by the pace, and by at least a second of the share (or,
		// before one is granted, a few requests): a first request, or
		// one a peer spills here, need not wait for a record.
		floorReq, floorTok := 8.0, 2*math.Max(s.maxTok, 1)
		if !math.IsInf(s.rpm, 0) {
			floorReq = max(floorReq, s.rpm/60)
		}
		if !math.IsInf(s.tpm, 0) {
			floorTok = max(floorTok, s.tpm/60)
		}
		req := max(s.ceilReq, s.taken+int64(math.Ceil(max(s.reqPace.ahead(float64(s.taken), now), floorReq))))
		tok := math.Max(s.ceilTok, s.tokTaken+math.Max(s.tokPace.ahead(s.tokTaken, now), floorTok))
		if !full && sent == 0 && toks == 0 && req == s.ceilReq && tok == s.ceilTok {
			continue
		}
		j.Shares = append(j.Shares, RateJournalShare{Name: name, At: now.UnixNano(), Sent: sent, Tokens: toks,
			Taken: s.taken, TokTaken: s.tokTaken, CeilReq: req, CeilTok: tok})
		raises = append(raises, raise{s, req, tok, s.taken, s.tokTaken})
	}
	return j, func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		for _, r := range raises {
			r.s.ceilReq, r.s.ceilTok = max(r.s.ceilReq, r.req), math.Max(r.s.ceilTok, r.tok)
			r.s.lastTaken, r.s.lastTok = max(r.s.lastTaken, r.taken), math.Max(r.s.lastTok, r.tokTaken)
		}
	}
}

// RateSent is what a share's journal says was sent at one time.
type RateSent struct {
	At     time.Time
	Sent   int64
	Tokens float64
}

// Recover hands the holder what its journal held when the node last
// stopped: by share, what was sent in the last window (as recorded, plus
// what the ceilings let it take unrecorded, as sent at now), so that the
// node, restarted under the same boot, sends no more than its share in
// any window; and seq, its last renewal's number. The sends of a share
// the holder does not hold yet (a key's limit it learns of from the
// ledger after it starts) are kept until SetCapacities makes it. Call it
// before Run.
func (h *RateHolder) Recover(sent map[string][]RateSent, seq uint64, now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	// Renewals the last boot made after its last record are numbered
	// below this.
	h.seq = max(h.seq, seq+1<<20)
	for name, recs := range sent {
		recs = slices.Clone(recs)
		slices.SortStableFunc(recs, func(a, b RateSent) int { return a.At.Compare(b.At) })
		s := h.shares[name]
		if s == nil {
			if h.recovered == nil {
				h.recovered = map[string][]RateSent{}
			}
			h.recovered[name] = recs
			continue
		}
		h.restoreLocked(s, recs, now)
	}
}

// restoreLocked adds to s what its journal says was sent (recs, oldest
// first) in the window before now.
func (h *RateHolder) restoreLocked(s *rateShare, recs []RateSent, now time.Time) {
	for _, r := range recs {
		if r.At.Add(h.window).Before(now) {
			continue
		}
		// Never after now, should the clock have stepped back across
		// the restart: what is taken next is appended at now, and the
		// window stays in order.
		at := r.At
		if at.After(now) {
			at = now
		}
		for range min(r.Sent, maxWanted) {
			s.sent = append(s.sent, at)
		}
		s.tokens = append(s.tokens, tokenRec{at: at, n: r.Tokens})
		s.tokenSum += r.Tokens
	}
}
