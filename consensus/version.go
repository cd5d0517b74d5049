package consensus

// The ledger's version: what every replica's state machine can read.
// Voters of two builds apply the same log, and a command type or field
// an older build does not know it ignores, so their books would part.
// Each build therefore says which version it supports (LedgerVersion,
// gossiped in its metadata); the leader records in the ledger the
// highest version every server of the Raft configuration supports
// (set_version, which only rises); and what an operator sends that
// needs more is refused until then (see agreement.go).

import (
	"encoding/json"
	"fmt"
)

// LedgerVersion is the version of the ledger's state machine this build
// supports. Versions:
//
//   - 0: a voter that advertises none, any earlier build. It is taken to
//     read what came before the ledger's first changes marked Upgrading
//     in the CHANGELOG: tenants (key hashes, residency, strict transit,
//     budget, revocations), budgets, keys added and revoked, providers'
//     capacities, syncs' usage and wants, forfeits.
//   - 1: every command and field the ledger had before it had a version:
//     also rates, a sync's cap, need and spend reports, set_key,
//     set_tenant_limits, seed_keys, and a tenant's limits and keys'
//     settings.
//   - 2: this build: set_version, and what this wave adds to sync and
//     set_budget.
const LedgerVersion = 2

// CmdSetVersion records the version every server of the Raft
// configuration supports (SetVersion): the leader proposes it, and a
// version at or below the ledger's changes nothing.
const CmdSetVersion = "set_version"

// SetVersion is the body of CmdSetVersion.
type SetVersion struct {
	Version int `json:"version"`
}

// commandVersion is the ledger version a replica needs to apply cmd as
// its leader does: from its type and, where a type gained fields, its
// body. A type this build does not know needs a later version than it
// supports. (A body that does not decode needs nothing more: every
// version refuses it alike.)
func commandVersion(cmd Command) int {
	switch cmd.Type {
	case CmdSetBudget, CmdAddKey, CmdRevokeKey, CmdSeedRate, CmdPutRate, CmdForfeit, CmdRateMark, CmdRateHandover:
		// (From version 2 a budget changed carries its leases, but that
		// is what the state machine of that version does, not a field.)
		return 0
	case CmdSeedTenant, CmdPutTenant:
		var t Tenant
		if json.Unmarshal(cmd.Body, &t) == nil && (t.Limits != nil || t.LimitsLive || len(t.Keys) > 0) {
			return 1
		}
		return 0
	case CmdSync:
		var c SyncCmd
		if json.Unmarshal(cmd.Body, &c) != nil {
			return 0
		}
		v := 0
		if len(c.Spend) > 0 {
			v = 1
		}
		if c.Recover != nil {
			v = VersionJournal
		}
		for _, u := range c.Usage {
			if u.Cap != nil {
				v = max(v, 1)
			}
			if u.Before != nil {
				v = max(v, VersionBudgetRevisions)
			}
		}
		for _, w := range c.Want {
			if w.Need != 0 {
				v = max(v, 1)
			}
		}
		return v
	case CmdRates, CmdSetKey, CmdSetTenantLimits, CmdSeedKeys:
		return 1
	case CmdSetVersion:
		return 2
	}
	return LedgerVersion + 1
}

// setVersion applies CmdSetVersion: the version only rises.
func (l *Ledger) setVersion(cmd Command) Result {
	var c SetVersion
	if err := json.Unmarshal(cmd.Body, &c); err != nil || c.Version < 0 {
		return fail(fmt.Errorf("%w: set_version needs a version of 0 or more", ErrInvalid))
	}
	l.s.Version = max(l.s.Version, c.Version)
	return Result{}
}

// Version returns the ledger version the servers of the Raft
// configuration agreed on (0 in a ledger older than versions): every
// replica reads the commands of that version.
func (l *Ledger) Version() int { return l.s.Version }
