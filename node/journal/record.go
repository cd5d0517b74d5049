package journal

import (
	"slices"
	"time"

	"github.com/llmesh/llmesh/consensus"
)

// Record is one entry of the journal: what changed since the record
// before it, or (Full) all of the state.
type Record struct {
	Time int64 `json:"time"` // Unix ns
	// Full, when set, is the whole state: it replaces what came before
	// (a compaction's first record).
	Full *State `json:"full,omitempty"`
	// Budget is the budget holder's boot, epoch and the leases that
	// changed; Spend, when set, the spend tally's reports not yet
	// acknowledged (all of them, as they are now).
	Budget consensus.BudgetJournal `json:"budget"`
	Spend  []consensus.SpendReport `json:"spend,omitempty"`
	// RateBoot is the rate holders' boot, kept across restarts; Rates
	// each holder's shares that took or moved their ceilings.
	RateBoot int64                            `json:"rate_boot,omitempty"`
	Rates    map[string]consensus.RateJournal `json:"rates,omitempty"`
}

// State is what the journal holds, replayed from its records: what a
// node restarted with its data recovers.
type State struct {
	// Budget is the last boot's: its epoch and every lease it held.
	Budget consensus.BudgetJournal `json:"budget"`
	// Spend are that boot's spend reports not acknowledged.
	Spend []consensus.SpendReport `json:"spend,omitempty"`
	// Prior are the boots before it, newest first, while the last has
	// no epoch in the journal (its first sync, which gives the ledger the
	// account of the boot it knew, may not have been made): the ledger
	// takes the account of whichever it knows.
	Prior []Prior `json:"prior,omitempty"`
	// RateBoot is the rate holders' boot; Rates their shares, by holder
	// and share.
	RateBoot int64                 `json:"rate_boot,omitempty"`
	Rates    map[string]*RateState `json:"rates,omitempty"`
	// Time is the last record's (Unix ns).
	Time int64 `json:"time"`
}

// Prior is a boot's budget account kept until its successor's first
// sync has given it to the ledger.
type Prior struct {
	Budget consensus.BudgetJournal `json:"budget"`
	Spend  []consensus.SpendReport `json:"spend,omitempty"`
}

// RateState is one rate holder's part of the state.
type RateState struct {
	Seq    uint64                 `json:"seq,omitempty"`
	Shares map[string]*ShareState `json:"shares,omitempty"`
}

// ShareState is what one share sent in the last window, and the last
// boot's counters: what it took, and the most its ceilings let it.
type ShareState struct {
	Sent     []consensus.RateSent `json:"sent,omitempty"`
	Taken    int64                `json:"taken"`
	TokTaken float64              `json:"tok_taken"`
	CeilReq  int64                `json:"ceil_req"`
	CeilTok  float64              `json:"ceil_tok"`
}

// keep is how long a share's sends are kept: past the rate window and
// its slack.
const keep = 2 * time.Minute

// maxPrior bounds the boots kept before the last: a node restarting
// over and over before it can sync keeps this many.
const maxPrior = 8

// Recovery is what a node restarted with its data tells its holders:
// the budget account of its last boots (nil for none), and what each
// rate holder's shares sent in the last window, the unrecorded sends its
// ceilings allowed counted as sent at now.
type Recovery struct {
	Budget   *consensus.Recovery
	RateBoot int64
	RateSeq  map[string]uint64
	Sent     map[string]map[string][]consensus.RateSent
}

// Recovery returns what s gives a node restarting at now.
func (s *State) Recovery(now time.Time) Recovery {
	r := Recovery{RateBoot: s.RateBoot, RateSeq: map[string]uint64{}, Sent: map[string]map[string][]consensus.RateSent{}}
	if s.Budget.Boot != 0 {
		var prior *consensus.Recovery
		for i := len(s.Prior) - 1; i >= 0; i-- {
			prior = consensus.RecoveryOf(s.Prior[i].Budget, s.Prior[i].Spend, prior)
		}
		r.Budget = consensus.RecoveryOf(s.Budget, s.Spend, prior)
	}
	for holder, rs := range s.Rates {
		r.RateSeq[holder] = rs.Seq
		sent := map[string][]consensus.RateSent{}
		for name, sh := range rs.Shares {
			recs := slices.Clone(sh.Sent)
			if n, t := sh.CeilReq-sh.Taken, sh.CeilTok-sh.TokTaken; n > 0 || t > 0 {
				recs = append(recs, consensus.RateSent{At: now, Sent: max(n, 0), Tokens: max(t, 0)})
			}
			sent[name] = recs
		}
		r.Sent[holder] = sent
	}
	return r
}

// apply replays r onto s.
func (s *State) apply(r *Record) {
	if r.Full != nil {
		*s = *r.Full
		s.Time = r.Time
		return
	}
	s.Time = r.Time
	b := r.Budget
	if b.Boot != s.Budget.Boot {
		// A new process. The last one's account goes to the ledger with
		// this one's first sync: kept until then, with those before it
		// (the ledger may know one of them, if the last never synced).
		if s.Budget.Boot != 0 {
			s.Prior = append([]Prior{{Budget: s.Budget, Spend: s.Spend}}, s.Prior...)
			s.Prior = s.Prior[:min(len(s.Prior), maxPrior)]
		}
		s.Budget, s.Spend = consensus.BudgetJournal{Boot: b.Boot}, nil
		s.restartRates(r.Time)
	}
	if b.Epoch != s.Budget.Epoch {
		// A new epoch: the ledger took the account of what came before
		// (the last boot's, in the first sync), and wrote off this
		// boot's older leases.
		s.Budget.Epoch, s.Budget.Leases = b.Epoch, nil
		if b.Epoch != 0 {
			s.Prior = nil
		}
	}
	for _, l := range b.Leases {
		i := slices.IndexFunc(s.Budget.Leases, func(x consensus.JournalLease) bool { return x.Tenant == l.Tenant && x.Period == l.Period })
		switch {
		case l.Gone && i >= 0:
			s.Budget.Leases = slices.Delete(s.Budget.Leases, i, i+1)
		case l.Gone:
		case i >= 0:
			s.Budget.Leases[i] = l
		default:
			s.Budget.Leases = append(s.Budget.Leases, l)
		}
	}
	if r.Spend != nil {
		s.Spend = r.Spend
	}
	if r.RateBoot != 0 {
		s.RateBoot = r.RateBoot
	}
	for holder, rj := range r.Rates {
		rs := s.rates(holder)
		rs.Seq = max(rs.Seq, rj.Seq)
		for _, sj := range rj.Shares {
			sh := rs.Shares[sj.Name]
			if sh == nil {
				sh = &ShareState{}
				rs.Shares[sj.Name] = sh
			}
			if sj.Sent > 0 || sj.Tokens > 0 {
				sh.add(consensus.RateSent{At: time.Unix(0, sj.At), Sent: sj.Sent, Tokens: sj.Tokens})
			}
			sh.Taken, sh.TokTaken, sh.CeilReq, sh.CeilTok = sj.Taken, sj.TokTaken, sj.CeilReq, sj.CeilTok
		}
	}
	s.trim()
}

func (s *State) rates(holder string) *RateState {
	if s.Rates == nil {
		s.Rates = map[string]*RateState{}
	}
	rs := s.Rates[holder]
	if rs == nil {
		rs = &RateState{Shares: map[string]*ShareState{}}
		s.Rates[holder] = rs
	}
	if rs.Shares == nil {
		rs.Shares = map[string]*ShareState{}
	}
	return rs
}

// bucket is how close sends are merged into one, counted at the later
// time (later is safe: they count against the window longer).
const bucket = time.Second

// add records what was sent at r.At, merged with the sends before it
// when they are within a bucket of it: a share keeps about one entry a
// second of its window, whatever the records' pace.
func (sh *ShareState) add(r consensus.RateSent) {
	if n := len(sh.Sent); n > 0 && r.At.Sub(sh.Sent[n-1].At) < bucket && !r.At.Before(sh.Sent[n-1].At) {
		last := &sh.Sent[n-1]
		last.At, last.Sent, last.Tokens = r.At, last.Sent+r.Sent, last.Tokens+r.Tokens
		return
	}
	sh.Sent = append(sh.Sent, r)
}

// restartRates counts, when a new process starts at t, what the last
// one's ceilings let it send unrecorded as sent at t (as that process
// recovered it), and starts the counters over.
func (s *State) restartRates(t int64) {
	for _, rs := range s.Rates {
		for _, sh := range rs.Shares {
			if n, k := sh.CeilReq-sh.Taken, sh.CeilTok-sh.TokTaken; n > 0 || k > 0 {
				sh.add(consensus.RateSent{At: time.Unix(0, t), Sent: max(n, 0), Tokens: max(k, 0)})
			}
			sh.Taken, sh.TokTaken, sh.CeilReq, sh.CeilTok = 0, 0, 0, 0
		}
	}
}

// trim drops sends too old to matter.
func (s *State) trim() {
	cut := time.Unix(0, s.Time).Add(-keep)
	for _, rs := range s.Rates {
		for name, sh := range rs.Shares {
			sh.Sent = slices.DeleteFunc(sh.Sent, func(x consensus.RateSent) bool { return x.At.Before(cut) })
			if len(sh.Sent) == 0 && sh.CeilReq == 0 && sh.CeilTok == 0 {
				delete(rs.Shares, name)
			}
		}
	}
}
