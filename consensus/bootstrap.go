package consensus

// Forming the cluster: a voter bootstraps alone (-dev, tests) or, with
// BootstrapExpect, once exactly that many voters are alive in the
// membership, on the lowest-named one only.

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/raft"
)

// BootstrapSelf bootstraps a one-voter cluster (agent -dev, tests). It
// refuses when Raft state exists.
func (s *Server) BootstrapSelf() error {
	return s.bootstrap([]raft.Server{{Suffrage: raft.Voter, ID: raft.ServerID(s.cfg.ID), Address: s.trans.LocalAddr()}})
}

func (s *Server) bootstrap(servers []raft.Server) error {
	f := s.raft.BootstrapCluster(raft.Configuration{Servers: servers})
	if err := f.Error(); err != nil && !errors.Is(err, raft.ErrCantBootstrap) {
		return fmt.Errorf("consensus: bootstrap: %w", err)
	} else if errors.Is(err, raft.ErrCantBootstrap) {
		return fmt.Errorf("consensus: bootstrap refused: this node already has Raft state")
	}
	ids := make([]string, len(servers))
	for i, sv := range servers {
		ids[i] = string(sv.ID)
	}
	s.log.Info("raft cluster bootstrapped", "voters", ids)
	return nil
}

// bootstrapLoop waits until exactly BootstrapExpect voters are alive in
// the membership, and the set has stayed the same for a second, then
// bootstraps with exactly them — but only on the voter with the lowest
// name in the set: it becomes the leader and brings the others in. Two
// voters bootstrapping different sets would make two clusters whose first
// entries collide, which Raft can never repair; with one bootstrapper per
// set that needs two voters each lowest in a different view of the mesh.
// A voter that sees more than expected is joining an existing cluster and
// waits for its leader to add it.
func (s *Server) bootstrapLoop() {
	t := time.NewTicker(200 * time.Millisecond)
	defer t.Stop()
	var last string
	var stableSince time.Time
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		if s.raft.Leader() != "" || s.cfg.Membership == nil {
			return // a cluster found us
		}
		var servers []raft.Server
		for _, v := range s.cfg.Membership.Voters() {
			if v.State == "alive" && v.RaftAddr != "" {
				servers = append(servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(v.ID), Address: raft.ServerAddress(v.RaftAddr)})
			}
		}
		slices.SortFunc(servers, func(a, b raft.Server) int { return strings.Compare(string(a.ID), string(b.ID)) })
		key := fmt.Sprint(servers)
		if key != last {
			last, stableSince = key, time.Now()
		}
		if len(servers) != s.cfg.BootstrapExpect || time.Since(stableSince) < time.Second {
			continue
		}
		if string(servers[0].ID) != s.cfg.ID {
			continue // the lowest-named voter bootstraps; this one waits for it
		}
		if err := s.bootstrap(servers); err != nil {
			s.log.Warn("bootstrap failed", "err", err)
		}
		return
	}
}
