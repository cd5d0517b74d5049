package consensus

import (
	"encoding/json"
	"fmt"
	"slices"
	"time"
)

// Command is the one envelope every change to the ledger travels in.
type Command struct {
	// ID makes a retried command apply once: a command whose ID was
	// applied in the last dedupWindow is answered as before, not applied.
	ID   string `json:"id"`
	Type string `json:"type"`
	// Time is the leader's clock when it proposed the command, in Unix
	// nanoseconds: the state machine's only notion of time.
	Time int64           `json:"time"`
	Body json.RawMessage `json:"body"`
}

// Command types.
const (
	CmdSeedTenant = "seed_tenant" // create a tenant if absent (from configuration)
	CmdPutTenant  = "put_tenant"  // create or replace a tenant
	CmdSetBudget  = "set_budget"  // change a tenant's budget
	CmdAddKey     = "add_key"     // add an API key's hash to a tenant, creating the tenant if asked
	CmdRevokeKey  = "revoke_key"  // revoke API keys: every node refuses them from then on
	CmdSeedRate   = "seed_rate"   // set a provider's capacity if absent
	CmdPutRate    = "put_rate"    // set a provider's capacity
	CmdSync       = "sync"        // a node reports usage and asks for escrow
	CmdForfeit    = "forfeit"     // write off a node's unreported escrow as spent
	CmdRates      = "rates"       // a node renews its rate shares (applied by the leader for it)
	// CmdRateMark and CmdRateHandover were written by leaders of an
	// earlier version, which kept rate shares outside the ledger: they
	// are applied from old logs and change nothing that matters now.
	CmdRateMark     = "rate_mark"
	CmdRateHandover = "rate_handover"
)

// dedupWindow is how long a command ID is remembered.
const dedupWindow = int64(10 * 60 * 1e9)

// Tenant is who may call, where its data may go, and what it may spend.
type Tenant struct {
	Name      string   `json:"name"`
	KeySHA256 []string `json:"key_sha256"`
	Residency string   `json:"residency,omitempty"`
	// StrictTransit keeps the tenant's requests on nodes of its
	// residency's jurisdiction.
	StrictTransit bool    `json:"strict_transit,omitempty"`
	Budget        *Budget `json:"budget,omitempty"`
	// Revoked are hashes of keys revoked: refused even where a node's
	// configuration file still lists them. A revoked key never comes back.
	Revoked []string `json:"revoked_sha256,omitempty"`
	// FileKeysRevoked means every key configuration files list for the
	// tenant is refused, known to the ledger or not (revoke all).
	FileKeysRevoked bool `json:"file_keys_revoked,omitempty"`
	// Limits are the tenant's mesh-wide rates, all its keys together;
	// LimitsLive means an operator set them (a file's seed no longer
	// does).
	Limits     *Limits `json:"limits,omitempty"`
	LimitsLive bool    `json:"limits_live,omitempty"`
	// Keys are the settings of those of its keys that have some, sorted
	// by hash (see keysettings.go).
	Keys []KeySettings `json:"keys,omitempty"`
}

// Budget is a spending limit per period.
type Budget struct {
	Limit  Nanos  `json:"limit"`
	Period string `json:"period"` // day | month | total
	// Rev is the ledger's revision of the account's budget, set when it
	// last changed (any given in a command is ignored): escrow a node
	// holds under an older revision is spent no more (budgetchange.go).
	Rev int64 `json:"rev,omitempty"`
}

// sameLimit reports whether a and b limit alike (their revisions aside).
func sameLimit(a, b *Budget) bool {
	return (a == nil) == (b == nil) && (a == nil || a.Limit == b.Limit && a.Period == b.Period)
}

// RateCapacity is a provider's mesh-wide rate limits; 0 means none.
type RateCapacity struct {
	Provider string `json:"provider"`
	RPM      int64  `json:"rpm"`
	TPM      int64  `json:"tpm"`
}

// nodeSeq orders one node's sync commands within its boot (epoch).
type nodeSeq struct {
	Boot  int64  `json:"boot"` // the boot the epoch was assigned to
	Epoch int64  `json:"epoch"`
	Seq   uint64 `json:"seq"`
	// SpendSeq is the last spend report of the boot applied.
	SpendSeq uint64 `json:"spend_seq,omitempty"`
}

type applied struct {
	ID   string `json:"id"`
	Time int64  `json:"time"`
}

// state is everything the ledger holds; it is the snapshot.
type state struct {
	// BudgetRev is the last revision given to a budget (Budget.Rev).
	BudgetRev int64                    `json:"budget_rev,omitempty"`
	Tenants   map[string]*Tenant       `json:"tenants"`
	Rates     map[string]*RateCapacity `json:"rates"`
	Books     map[string]*Books        `json:"books"` // by tenant + "/" + period
	Nodes     map[string]*nodeSeq      `json:"nodes"`
	Applied   []applied                `json:"applied"` // oldest first
	Time      int64                    `json:"time"`    // of the last command
	// RatesUntil is when rate shares granted by a leader so far may have
	// stopped mattering (their lease and window over): a new leader that
	// finds it in the future must learn what nodes hold before granting.
	RatesUntil int64 `json:"rates_until,omitempty"`
	// Handover is what the last leader granted, when it handed leadership
	// over gracefully; the next mark clears it.
	Handover *RateHandover `json:"rate_handover,omitempty"`
	// Shares are the rate shares granted, by provider.
	Shares map[string]*rateBook `json:"shares,omitempty"`
	// Spend is the spend attributed to each tenant (spend.go), and
	// SpendPruned the hour its old buckets were last dropped.
	Spend       map[string]*spendBook `json:"spend,omitempty"`
	SpendPruned int64                 `json:"spend_pruned,omitempty"`
	// Version is the ledger version the servers of the Raft
	// configuration agreed on (version.go); 0 in a snapshot older than
	// versions.
	Version int `json:"version,omitempty"`
}

// Ledger is the pure state machine behind Raft: deterministic, no clock,
// no I/O. It is not safe for concurrent use; the FSM serializes it.
type Ledger struct {
	s       state
	applied map[string]bool // index of s.Applied
}

// NewLedger returns an empty ledger.
func NewLedger() *Ledger {
	l := &Ledger{}
	l.reset(state{})
	return l
}

func (l *Ledger) reset(s state) {
	if s.Tenants == nil {
		s.Tenants = map[string]*Tenant{}
	}
	if s.Rates == nil {
		s.Rates = map[string]*RateCapacity{}
	}
	if s.Books == nil {
		s.Books = map[string]*Books{}
	}
	if s.Nodes == nil {
		s.Nodes = map[string]*nodeSeq{}
	}
	for _, b := range s.Books {
		if b.Leases == nil {
			b.Leases = map[string]*Lease{}
		}
		b.reserved, b.inbound, b.carryTo = b.sumReserved(), 0, nil
	}
	for _, b := range s.Books {
		if b.carryTo = s.Books[b.Carry]; b.carryTo != nil {
			b.carryTo.inbound += b.reserved
		}
	}
	l.s = s
	l.applied = make(map[string]bool, len(s.Applied))
	for _, a := range s.Applied {
		l.applied[a.ID] = true
	}
}

// Result is what applying a command returns.
type Result struct {
	Err string `json:"err,omitempty"`
	// Duplicate means the command's ID had been applied already.
	Duplicate bool        `json:"duplicate,omitempty"`
	Sync      *SyncResult `json:"sync,omitempty"`
	Rates     []RateGrant `json:"rates,omitempty"`
}

// Apply applies cmd and returns its result. Unknown command types are an
// error result (a newer leader's command an older replica cannot read
// changes nothing here), never a panic.
func (l *Ledger) Apply(cmd Command) Result {
	// Time never runs backwards here, whatever a new leader's clock says:
	// a period once over stays over.
	if cmd.Time < l.s.Time {
		cmd.Time = l.s.Time
	}
	l.s.Time = cmd.Time
	l.prune(cmd.Time)
	if cmd.ID != "" && l.applied[cmd.ID] {
		r := Result{Duplicate: true}
		if cmd.Type == CmdSync { // a retried sync still learns its leases
			var c SyncCmd
			if json.Unmarshal(cmd.Body, &c) == nil {
				r.Sync = l.syncResult(c.Node, cmd.Time, nil)
			}
		}
		return r
	}
	r := l.apply(cmd)
	if cmd.ID != "" {
		l.applied[cmd.ID] = true
		l.s.Applied = append(l.s.Applied, applied{ID: cmd.ID, Time: cmd.Time})
	}
	return r
}

// prune forgets command IDs older than the dedup window, oldest first.
func (l *Ledger) prune(now int64) {
	i := 0
	for i < len(l.s.Applied) && l.s.Applied[i].Time < now-dedupWindow {
		delete(l.applied, l.s.Applied[i].ID)
		i++
	}
	if i > 0 {
		// Reslice rather than shift: append copies only what is live when
		// it next grows, where a shift would move the whole window on
		// every command.
		l.s.Applied = l.s.Applied[i:]
	}
}

func fail(err error) Result { return Result{Err: err.Error()} }

// apply applies cmd; from ledger version 2, a command that may change
// budgets (a tenant's or a key's) has each change applied to the books
// (budgetChanged).
func (l *Ledger) apply(cmd Command) Result {
	if !changesBudgets(cmd.Type) || l.s.Version < VersionBudgetRevisions {
		return l.applyCmd(cmd)
	}
	before := l.budgetIndex()
	r := l.applyCmd(cmd)
	if r.Err == "" {
		l.budgetsChanged(before, cmd.Time)
	}
	return r
}

func (l *Ledger) applyCmd(cmd Command) Result {
	switch cmd.Type {
	case CmdSeedTenant, CmdPutTenant:
		var t Tenant
		if err := json.Unmarshal(cmd.Body, &t); err != nil || t.Name == "" {
			return fail(fmt.Errorf("%w: tenant", ErrInvalid))
		}
		if t.Budget != nil && !validPeriod(t.Budget.Period) {
			return fail(fmt.Errorf("%w: period %q", ErrInvalid, t.Budget.Period))
		}
		old, exists := l.s.Tenants[t.Name]
		if exists && cmd.Type == CmdSeedTenant {
			return Result{}
		}
		if err := t.replacing(old); err != nil {
			return fail(err)
		}
		l.s.Tenants[t.Name] = &t
		l.updateLimits(t.Name, cmd.Time)
	case CmdAddKey:
		return l.addKey(cmd)
	case CmdSetKey, CmdSetTenantLimits, CmdSeedKeys:
		return l.applyKeySettings(cmd)
	case CmdSetVersion:
		return l.setVersion(cmd)
	case CmdRevokeKey:
		return l.revokeKey(cmd)
	case CmdSetBudget:
		var c struct {
			Tenant string  `json:"tenant"`
			Budget *Budget `json:"budget"`
		}
		if err := json.Unmarshal(cmd.Body, &c); err != nil {
			return fail(fmt.Errorf("%w: budget", ErrInvalid))
		}
		t := l.s.Tenants[c.Tenant]
		if t == nil {
			return fail(fmt.Errorf("%w: %q", ErrNoTenant, c.Tenant))
		}
		if c.Budget != nil && (!validPeriod(c.Budget.Period) || c.Budget.Limit < 0) {
			return fail(fmt.Errorf("%w: budget", ErrInvalid))
		}
		t.Budget = c.Budget
		l.updateLimits(c.Tenant, cmd.Time)
	case CmdSeedRate, CmdPutRate:
		var r RateCapacity
		if err := json.Unmarshal(cmd.Body, &r); err != nil || r.Provider == "" || r.RPM < 0 || r.TPM < 0 {
			return fail(fmt.Errorf("%w: rate capacity", ErrInvalid))
		}
		if _, exists := l.s.Rates[r.Provider]; exists && cmd.Type == CmdSeedRate {
			return Result{}
		}
		l.s.Rates[r.Provider] = &r
	case CmdRateMark:
		var c struct {
			Until int64 `json:"until"`
		}
		if err := json.Unmarshal(cmd.Body, &c); err != nil {
			return fail(fmt.Errorf("%w: rate mark", ErrInvalid))
		}
		l.s.RatesUntil = max(l.s.RatesUntil, c.Until)
		l.s.Handover = nil // a leader granting since: the record is stale
	case CmdRateHandover:
		var h RateHandover
		if err := json.Unmarshal(cmd.Body, &h); err != nil {
			return fail(fmt.Errorf("%w: rate handover", ErrInvalid))
		}
		l.s.Handover = &h
	case CmdRates:
		var c RatesCmd
		if err := json.Unmarshal(cmd.Body, &c); err != nil || c.Node == "" {
			return fail(fmt.Errorf("%w: rates", ErrInvalid))
		}
		return Result{Rates: l.rates(c, cmd.Time)}
	case CmdSync:
		var c SyncCmd
		if err := json.Unmarshal(cmd.Body, &c); err != nil || c.Node == "" {
			return fail(fmt.Errorf("%w: sync", ErrInvalid))
		}
		return Result{Sync: l.sync(c, cmd.Time)}
	case CmdForfeit:
		var c struct {
			Node string `json:"node"`
			// ExpiredBefore, when set, limits the forfeit to leases that
			// expired before it (the leader's automatic clean-up).
			ExpiredBefore int64 `json:"expired_before,omitempty"`
		}
		if err := json.Unmarshal(cmd.Body, &c); err != nil || c.Node == "" {
			return fail(fmt.Errorf("%w: forfeit", ErrInvalid))
		}
		l.forfeit(c.Node, func(le *Lease) bool { return c.ExpiredBefore == 0 || le.Expires < c.ExpiredBefore })
	default:
		return fail(fmt.Errorf("%w %q", ErrUnknownCommand, cmd.Type))
	}
	return Result{}
}

func validPeriod(p string) bool { return p == PeriodDay || p == PeriodMonth || p == PeriodTotal }

// books returns the account's books for the period of its budget bud
// containing now, opening them if needed.
func (l *Ledger) books(account string, bud *Budget, now int64) *Books {
	p, end := periodOf(now, bud.Period)
	k := account + "/" + p
	b := l.s.Books[k]
	if b == nil {
		b = &Books{Tenant: account, Period: p, End: end, Limit: bud.Limit, Leases: map[string]*Lease{}}
		l.s.Books[k] = b
	}
	return b
}

// forfeit writes off the outstanding escrow of node's leases that match
// as spent: the conservative assumption about money a node can no longer
// account for.
func (l *Ledger) forfeit(node string, match func(*Lease) bool) {
	for _, k := range sortedKeys(l.s.Books) {
		b := l.s.Books[k]
		if le := b.Leases[node]; le != nil && match(le) {
			r := le.Reserved()
			if dst := b.forfeitTo(le); dst != nil {
				dst.Settled += r
				dst.Forfeited += r
			}
			b.dropLease(node)
		}
	}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// booksRetention is how long the books of an ended period are kept, for
// operators to read, once they hold no escrow: a month and a day.
const booksRetention = int64(32 * 24 * time.Hour)

// close drops the books of periods that ended long ago and hold no escrow.
func (l *Ledger) close(now int64) {
	for k, b := range l.s.Books { // the same books go, in any order
		if b.End <= now-booksRetention && len(b.Leases) == 0 && b.inbound == 0 {
			delete(l.s.Books, k)
		}
	}
}

// Check verifies the escrow invariant on every book: settled plus
// reserved within the limit. It returns the first violation.
func (l *Ledger) Check() error {
	for _, k := range sortedKeys(l.s.Books) {
		b := l.s.Books[k]
		if r := b.sumReserved(); r != b.reserved {
			return fmt.Errorf("books %s: the kept sum of reserved escrow %v is not the leases' %v", k, b.reserved, r)
		}
		var in Nanos
		for _, src := range l.s.Books {
			if src.Carry == k {
				in += src.sumReserved()
			}
		}
		if in != b.inbound || (b.Carry != "" && b.Carry != "-") != (b.carryTo != nil) {
			return fmt.Errorf("books %s: the kept sum of escrow carried in %v is not the carried leases' %v", k, b.inbound, in)
		}
		if s, r := b.Settled, b.Reserved()+b.inbound; s+r > b.Limit && !b.Over {
			return fmt.Errorf("books %s: settled %v + reserved %v exceed the limit %v", k, s, r, b.Limit)
		}
	}
	return nil
}

// Snapshot returns the whole state, deterministically encoded.
func (l *Ledger) Snapshot() ([]byte, error) { return json.Marshal(l.s) }

// Restore replaces the state with a snapshot.
func (l *Ledger) Restore(b []byte) error {
	var s state
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("ledger snapshot: %w", err)
	}
	l.reset(s)
	return nil
}

// Tenant returns a copy of the named tenant.
func (l *Ledger) Tenant(name string) (Tenant, bool) {
	t := l.s.Tenants[name]
	if t == nil {
		return Tenant{}, false
	}
	c := *t
	c.KeySHA256 = slices.Clone(t.KeySHA256)
	c.Revoked = slices.Clone(t.Revoked)
	if t.Budget != nil {
		b := *t.Budget
		c.Budget = &b
	}
	c.cloneSettings()
	return c, true
}

// Tenants returns copies of every tenant, sorted by name.
func (l *Ledger) Tenants() []Tenant {
	out := make([]Tenant, 0, len(l.s.Tenants))
	for _, k := range sortedKeys(l.s.Tenants) {
		t, _ := l.Tenant(k)
		out = append(out, t)
	}
	return out
}

// Rates returns every provider's capacity, sorted by provider.
func (l *Ledger) Rates() []RateCapacity {
	out := make([]RateCapacity, 0, len(l.s.Rates))
	for _, k := range sortedKeys(l.s.Rates) {
		out = append(out, *l.s.Rates[k])
	}
	return out
}

// RatesUntil returns until when rate shares granted so far may matter.
func (l *Ledger) RatesUntil() int64 { return l.s.RatesUntil }

// Handover returns the rate shares the last leader recorded when it
// handed leadership over, or nil.
func (l *Ledger) Handover() *RateHandover { return l.s.Handover }

// ExpiredLeases returns the nodes holding escrow in leases that expired
// before t, sorted.
func (l *Ledger) ExpiredLeases(t int64) []string {
	seen := map[string]bool{}
	for _, b := range l.s.Books {
		for node, le := range b.Leases {
			if le.Expires < t && le.Reserved() > 0 {
				seen[node] = true
			}
		}
	}
	return sortedKeys(seen)
}

// Time returns the timestamp of the last command applied.
func (l *Ledger) Time() int64 { return l.s.Time }
