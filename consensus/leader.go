package consensus

// The leader's duties, run only while this voter leads: seeding the
// configuration, keeping the Raft configuration in step with the
// membership, and writing off the escrow of nodes gone for good.

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// leaderWatch runs the leader's duties while this node leads.
func (s *Server) leaderWatch() {
	var stopLeading chan struct{}
	var leading sync.WaitGroup
	defer func() {
		if stopLeading != nil {
			close(stopLeading)
		}
		leading.Wait()
	}()
	for {
		select {
		case <-s.stop:
			return
		case isLeader := <-s.leaderCh:
			s.leader.Store(isLeader)
			switch {
			case isLeader && stopLeading == nil:
				stopLeading = make(chan struct{})
				ch := stopLeading
				leading.Go(func() { s.leaderLoop(ch) })
			case !isLeader && stopLeading != nil:
				close(stopLeading)
				leading.Wait()
				stopLeading = nil
			}
		}
	}
}

// leaderLoop is the leader's work: after a barrier (so the state is
// current), agree on the ledger's version, seed the configuration and
// keep the Raft configuration and the version in step with the
// membership. Rate shares need nothing here: they are ledger state,
// current on this replica once the barrier has passed.
func (s *Server) leaderLoop(stop <-chan struct{}) {
	if err := s.raft.Barrier(s.cfg.ApplyTimeout).Error(); err != nil {
		s.log.Warn("leader barrier failed", "err", err)
		return
	}
	s.log.Info("raft leadership acquired")
	clear(s.warned)
	// The version first, so that a new ledger takes its seed whole.
	agreed, _ := s.raiseVersion(context.Background())
	var pending []Command // seed commands of a version not agreed yet
	if s.cfg.Seed != nil {
		pending = s.seed(s.cfg.Seed())
	}
	t := time.NewTicker(s.cfg.ReconcileInterval)
	defer t.Stop()
	for {
		s.reconcile()
		if v, err := s.raiseVersion(context.Background()); err == nil && v > agreed {
			agreed = v
			if len(pending) > 0 {
				pending = s.seed(pending)
			}
		}
		select {
		case <-stop:
			s.log.Info("raft leadership lost")
			return
		case <-s.stop:
			return
		case <-s.nudge: // the membership changed: reconcile at the loop's top
		case <-t.C:
			s.forfeitGone()
		}
	}
}

// seed applies the configuration's seed commands cs, where absent, and
// returns those that need a ledger version above the agreed one: they
// wait until every voter supports it.
func (s *Server) seed(cs []Command) (later []Command) {
	for _, c := range cs {
		_, err := s.Apply(context.Background(), c)
		switch {
		case errors.Is(err, ErrLedgerVersion):
			later = append(later, c)
			s.log.Warn("a seed command waits until every voter is upgraded", "type", c.Type, "id", c.ID, "err", err)
		case err != nil:
			s.log.Warn("seeding the ledger failed", "type", c.Type, "err", err)
		}
	}
	return later
}

// reconcile adds alive voters the configuration lacks and removes those
// that left the mesh (drained or left for good; one that comes back is
// added again). A voter is removed only while the voters that remain keep
// a quorum of alive ones, never the last. Failed voters stay: they may
// come back, and removing them would shrink the quorum under a partition.
// A voter whose build supports less than the ledger's agreed version is
// not added (its replica would ignore what it cannot read), and one in
// the configuration already is warned of: both must be upgraded.
func (s *Server) reconcile() {
	if s.cfg.Membership == nil {
		return
	}
	f := s.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return
	}
	have := map[string]raft.Server{}
	for _, sv := range f.Configuration().Servers {
		have[string(sv.ID)] = sv
	}
	voters := s.cfg.Membership.Voters()
	alive := map[string]bool{s.cfg.ID: true}
	for _, v := range voters {
		if v.State != "failed" && v.State != "left" { // draining voters still vote
			alive[v.ID] = true
		}
	}
	agreed := s.agreedVersion()
	for _, v := range voters {
		sv, in := have[v.ID]
		old := v.ID != s.cfg.ID && v.Version < agreed
		if old && in && v.State != "left" {
			s.warnOld(v, agreed, "a voter of the Raft configuration supports a ledger version below the agreed one: upgrade it, as its replica ignores what it cannot read")
		}
		switch {
		case v.State == "alive" && v.RaftAddr != "" && (!in || string(sv.Address) != v.RaftAddr):
			if old && !in {
				s.warnOld(v, agreed, "a voter's build supports a ledger version below the agreed one: it is not added to the Raft configuration until it is upgraded")
				continue
			}
			if err := s.raft.AddVoter(raft.ServerID(v.ID), raft.ServerAddress(v.RaftAddr), 0, s.cfg.ApplyTimeout).Error(); err != nil {
				s.log.Warn("could not add a voter", "voter", v.ID, "err", err)
			} else {
				s.log.Info("voter added", "voter", v.ID, "addr", v.RaftAddr)
			}
		case v.State == "left" && in && v.ID != s.cfg.ID:
			if !quorumWithout(have, alive, v.ID) {
				s.log.Warn("a voter left, but removing it would leave no quorum of alive voters: it stays", "voter", v.ID)
				continue
			}
			if err := s.raft.RemoveServer(raft.ServerID(v.ID), 0, s.cfg.ApplyTimeout).Error(); err != nil {
				s.log.Warn("could not remove a voter that left", "voter", v.ID, "err", err)
			} else {
				delete(have, v.ID)
				s.log.Info("voter removed", "voter", v.ID)
			}
		}
	}
}

// quorumWithout reports whether the configuration have, less the voter
// id, still has a majority of alive voters.
func quorumWithout(have map[string]raft.Server, alive map[string]bool, id string) bool {
	total, up := 0, 0
	for sid, sv := range have {
		if sid == id || sv.Suffrage != raft.Voter {
			continue
		}
		total++
		if alive[sid] {
			up++
		}
	}
	if total == 0 {
		return false
	}
	return up >= total/2+1
}

// forfeitGone writes off the escrow of nodes gone from the mesh whose
// leases expired more than ForfeitGrace ago: they cannot report any more,
// and their escrow would otherwise stay reserved for the whole period.
func (s *Server) forfeitGone() {
	if s.cfg.Membership == nil {
		return
	}
	before := s.now().Add(-ForfeitGrace).UnixNano()
	var nodes []string
	s.fsm.Read(func(l *Ledger) { nodes = l.ExpiredLeases(before) })
	for _, node := range nodes {
		if !s.cfg.Membership.Gone(node) {
			continue
		}
		c, _ := newCommand("", CmdForfeit, map[string]any{"node": node, "expired_before": before})
		if _, err := s.Apply(context.Background(), c); err != nil {
			s.log.Warn("could not write off a gone node's escrow", "node", node, "err", err)
		} else {
			s.log.Info("escrow of a gone node written off as spent", "node", node)
		}
	}
}

// Reconcile asks the leader, if this voter leads, to match the Raft
// configuration to the membership now rather than at its next tick. It
// never blocks.
func (s *Server) Reconcile() {
	select {
	case s.nudge <- struct{}{}:
	default:
	}
}
