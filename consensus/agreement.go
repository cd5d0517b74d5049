package consensus

// How the voters agree on a ledger version, and the gate that keeps what
// they cannot all read out of the log: the leader raises the ledger's
// version to what every server of the Raft configuration supports, and
// refuses a command that needs more (ErrLedgerVersion).

import (
	"context"
	"fmt"
	"slices"
	"strings"
)

// gatingVersion is the first ledger version whose leaders refuse what
// needs a version above the agreed one: a leader that advertises less
// applies whatever it is sent.
const gatingVersion = 2

// voterVersion is a server of the Raft configuration and the ledger
// version its build supports.
type voterVersion struct {
	ID      string
	Version int
	// Seen means the version is known: this voter's own, or one its
	// gossip metadata gives. An unseen server counts as 0.
	Seen bool
}

func (v voterVersion) String() string {
	if !v.Seen {
		return v.ID + " (not seen in gossip)"
	}
	return fmt.Sprintf("%s (version %d)", v.ID, v.Version)
}

// advertised returns the voters the membership knows, by ID, with this
// voter's version its build's own.
func (s *Server) advertised() map[string]VoterInfo {
	out := map[string]VoterInfo{}
	if s.cfg.Membership != nil {
		for _, v := range s.cfg.Membership.Voters() {
			out[v.ID] = v
		}
	}
	self := out[s.cfg.ID]
	self.ID, self.Version = s.cfg.ID, LedgerVersion
	out[s.cfg.ID] = self
	return out
}

// configVersions returns every server of the Raft configuration, voter
// or not (each holds a replica), with the version it supports, sorted
// by ID.
func (s *Server) configVersions() ([]voterVersion, error) {
	f := s.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, err
	}
	adv := s.advertised()
	var out []voterVersion
	for _, sv := range f.Configuration().Servers {
		v, seen := adv[string(sv.ID)]
		out = append(out, voterVersion{ID: string(sv.ID), Version: v.Version, Seen: seen})
	}
	slices.SortFunc(out, func(a, b voterVersion) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}

// supported is the highest ledger version every one of vs supports, and
// this build too: what the ledger may agree on.
func supported(vs []voterVersion) int {
	v := LedgerVersion
	for _, x := range vs {
		v = min(v, x.Version)
	}
	return v
}

// agreedVersion is the ledger's version on this replica.
func (s *Server) agreedVersion() int {
	var v int
	s.fsm.Read(func(l *Ledger) { v = l.Version() })
	return v
}

// raiseVersion has the leader record the version every server of the
// Raft configuration supports, when it is above the ledger's, and
// returns the ledger's version after.
func (s *Server) raiseVersion(ctx context.Context) (int, error) {
	agreed := s.agreedVersion()
	vs, err := s.configVersions()
	if err != nil || len(vs) == 0 {
		return agreed, err
	}
	target := supported(vs)
	if target <= agreed {
		return agreed, nil
	}
	c, err := newCommand("", CmdSetVersion, SetVersion{Version: target})
	if err != nil {
		return agreed, err
	}
	if _, err := s.Apply(ctx, c); err != nil {
		s.log.Warn("could not raise the ledger's version", "version", target, "err", err)
		return agreed, err
	}
	s.log.Info("every voter supports a later ledger version: the ledger now uses it", "version", target, "was", agreed)
	return target, nil
}

// gated reports whether the leader refuses commands of type typ that
// need a ledger version above the agreed one: every type but a holder's
// own (sync, rates), whose holder learns the agreed version
// (SyncResult.Version) and sends what it allows, and the leader's
// set_version.
func gated(typ string) bool {
	return typ != CmdSync && typ != CmdRates && typ != CmdSetVersion
}

// admit lets cmd through the leader's apply path, or refuses it with
// ErrLedgerVersion, naming the voters to upgrade, when it needs a ledger
// version above the agreed one (see gated). When every server of the
// configuration supports what it needs but the ledger has not recorded
// it yet, the version is raised first.
func (s *Server) admit(ctx context.Context, cmd Command) error {
	if !gated(cmd.Type) {
		return nil
	}
	need, agreed := commandVersion(cmd), s.agreedVersion()
	if need <= agreed {
		return nil
	}
	if need > LedgerVersion {
		return fmt.Errorf("%w: %s is not a command this build reads (it supports ledger version %d)", ErrLedgerVersion, cmd.Type, LedgerVersion)
	}
	vs, err := s.configVersions()
	if err == nil && supported(vs) >= need {
		if agreed, err = s.raiseVersion(ctx); err == nil && need <= agreed {
			return nil
		}
	}
	return versionError(cmd.Type, need, agreed, vs)
}

// versionError refuses a command of type typ that needs version need
// while the ledger's is agreed, naming those of vs that support less.
func versionError(typ string, need, agreed int, vs []voterVersion) error {
	var old []string
	for _, v := range vs {
		if v.Version < need {
			old = append(old, v.String())
		}
	}
	switch len(old) {
	case 0:
		return fmt.Errorf("%w: %s needs ledger version %d and the ledger is at version %d: retry once the leader has raised it",
			ErrLedgerVersion, typ, need, agreed)
	case 1:
		return fmt.Errorf("%w: %s needs ledger version %d; voter %s must be upgraded first", ErrLedgerVersion, typ, need, old[0])
	}
	return fmt.Errorf("%w: %s needs ledger version %d; voters %s must be upgraded first", ErrLedgerVersion, typ, need, strings.Join(old, ", "))
}

// checkLeader refuses, on a voter about to send cmd to a leader elsewhere,
// what that leader cannot gate: a leader whose gossip metadata says its
// build is older than gating (it applies whatever it is sent) and that
// does not support what cmd needs. A leader it cannot name or see is
// left to answer for itself.
func (c *Client) checkLeader(cmd Command) error {
	if c.server == nil || !gated(cmd.Type) {
		return nil
	}
	id, ok := c.server.Leader()
	if !ok {
		return nil
	}
	for _, v := range c.membership.Voters() {
		if v.ID != id || v.Version >= gatingVersion {
			continue
		}
		if need := commandVersion(cmd); need > v.Version {
			return fmt.Errorf("%w: %s needs ledger version %d; the leader %s must be upgraded first", ErrLedgerVersion, cmd.Type, need,
				voterVersion{ID: v.ID, Version: v.Version, Seen: true})
		}
	}
	return nil
}

// warnOld warns, once per version it advertises, of a voter whose build
// is older than the ledger's agreed version. Only the leader's loop
// calls it.
func (s *Server) warnOld(v VoterInfo, agreed int, msg string) {
	if w, ok := s.warned[v.ID]; ok && w == v.Version {
		return
	}
	s.warned[v.ID] = v.Version
	s.log.Warn(msg, "voter", v.ID, "voter_version", v.Version, "ledger_version", agreed)
}
