package consensus

// A budget changed while escrow of it is out. A change of an account's
// budget (its limit, its period, or its removal) holds from the command
// that makes it, whatever made the tenant (a configuration file's seed,
// llmesh tenants add, the admin API):
//
//   - the books of the period now in force get the new limit; where what
//     is settled and held already exceeds it (a limit lowered), they
//     grant nothing until it fits again, and nodes holding idle escrow
//     are asked for it back;
//   - books of the period no longer in force stop: their leases are
//     recalled, and what those leases go on to spend, and the escrow
//     they still hold, count in the books in force (Books.Carry), so
//     that escrow granted under the old limit cannot be spent past the
//     new one;
//   - the budget's revision (Budget.Rev) rises: a node that learns of it
//     (from the tenants it reads each second, or its next sync) reserves
//     nothing more from escrow of an older revision, gives back what of
//     it is not reserved, and asks afresh under the new one.
//
// What a period settles therefore never exceeds its limit in force by
// more than what was reserved, and what was spent and not yet known to
// the node, when the node learned of the change.

// VersionBudgetRevisions is the ledger version from which budgets have
// revisions and a change carries leases (below it, a change only sets
// the limit of the current period's books, as older voters do).
const VersionBudgetRevisions = 2

// updateLimits applies an account's budget (a tenant's or a key's) to
// its current period's books, as ledgers before budget revisions did
// for every command that set one (from version 2 budgetChanged does).
func (l *Ledger) updateLimits(account string, now int64) {
	if l.s.Version >= VersionBudgetRevisions {
		return
	}
	if bud := l.budgetOf(account); bud != nil {
		l.books(account, bud, now).Limit = bud.Limit
	}
}

// changesBudgets reports whether a command of type typ may change an
// account's budget.
func changesBudgets(typ string) bool {
	switch typ {
	case CmdSeedTenant, CmdPutTenant, CmdSetBudget, CmdAddKey, CmdRevokeKey, CmdSetKey, CmdSetTenantLimits, CmdSeedKeys:
		return true
	}
	return false
}

// budgetIndex returns every account's budget, by account.
func (l *Ledger) budgetIndex() map[string]Budget {
	out := map[string]Budget{}
	for name, t := range l.s.Tenants {
		if t.Budget != nil {
			out[name] = *t.Budget
		}
		for _, k := range t.Keys {
			if k.Budget != nil {
				out[KeyAccount(name, k.ID())] = *k.Budget
			}
		}
	}
	return out
}

// budgetsChanged applies, account by account in order, each budget that
// differs from before, and keeps the revision of each that does not.
func (l *Ledger) budgetsChanged(before map[string]Budget, now int64) {
	after := l.budgetIndex()
	accounts := map[string]bool{}
	for a := range before {
		accounts[a] = true
	}
	for a := range after {
		accounts[a] = true
	}
	for _, a := range sortedKeys(accounts) {
		var old *Budget
		if b, ok := before[a]; ok {
			old = &b
		}
		nu := l.budgetOf(a) // the ledger's own, to stamp
		if sameLimit(old, nu) {
			if nu != nil {
				nu.Rev = old.Rev // replaced by an equal one: the same revision
			}
			continue
		}
		if nu != nil {
			l.s.BudgetRev++
			nu.Rev = l.s.BudgetRev
		}
		l.budgetChanged(a, old, nu, now)
	}
}

// budgetChanged applies account's change of budget from old to nu
// (either may be nil) to its books.
func (l *Ledger) budgetChanged(account string, old, nu *Budget, now int64) {
	into := "-" // the books in force, where carried leases count
	var in *Books
	if nu != nil {
		in = l.books(account, nu, now)
		in.Limit = nu.Limit
		into = account + "/" + in.Period
		if in.Carry != "" {
			l.carry(into, "") // in force again (the period changed back)
		}
	}
	if old != nil {
		p, _ := periodOf(now, old.Period)
		was := account + "/" + p
		for _, k := range sortedKeys(l.s.Books) {
			b := l.s.Books[k]
			if b.Tenant != account || k == into || len(b.Leases) == 0 {
				continue
			}
			if k == was || b.Carry != "" {
				l.carry(k, into)
			}
		}
	}
	if in != nil && in.free() < 0 {
		in.Over, in.ShortAt = true, now
	}
}

// carry makes the books keyed k carry their leases into the books keyed
// into ("-": none; "": carry no more).
func (l *Ledger) carry(k, into string) {
	b := l.s.Books[k]
	if b.carryTo != nil {
		b.carryTo.inbound -= b.reserved
	}
	b.Carry, b.carryTo = into, l.s.Books[into]
	if b.carryTo != nil {
		b.carryTo.inbound += b.reserved
	}
}

// settleTo is where spend reported on b's leases is settled once their
// nodes learned of the change: b itself, or the books it carries into
// (nil when the account has no budget any more).
func (b *Books) settleTo() *Books {
	if b.Carry == "" {
		return b
	}
	return b.carryTo
}

// forfeitTo is where the escrow of le, a lease of b, is written off: the
// books it carries into once its node had learned of the change (what it
// held then was reserved under the new budget), else b.
func (b *Books) forfeitTo(le *Lease) *Books {
	if le.Before == nil {
		return b
	}
	return b.settleTo()
}

// settle records that le, a lease of b, has spent spent in all. Of a
// lease whose books no longer count, what its node spent before it
// learned that the budget changed (UsageItem.Before; all of it while the
// node has not said) was spent under the old budget and stays in b; the
// rest, what was reserved when it learned, is settled where b's leases
// now count.
func (b *Books) settle(le *Lease, spent Nanos, before *Nanos) {
	if before != nil && le.Before == nil && b.Carry != "" {
		v := *before
		le.Before = &v
	}
	d := spent - le.Spent
	if d <= 0 {
		return
	}
	dst := b.settleTo()
	if dst != b {
		kept := d // the node has not learned yet
		if le.Before != nil {
			kept = min(max(*le.Before-le.Spent, 0), d)
		}
		b.Settled += kept
		d -= kept
	}
	if dst != nil {
		if over := spent - max(le.Granted, le.Spent); over > 0 {
			dst.Overspend += min(over, d)
		}
		dst.Settled += d
	}
	b.change(le, func(le *Lease) { le.Spent = spent })
}
