package ledger

// Keys' and tenants' own limits and budgets as the request path spends
// them: the mesh-wide limits of each key and tenant divided among the
// nodes by the same rate shares as providers' (a holder of its own, the
// subjects'), and a key's budget as an escrow account of its own beside
// its tenant's.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/llmesh/llmesh/consensus"
	"github.com/llmesh/llmesh/node/config"
	"github.com/llmesh/llmesh/route"
)

// governance is what the request path reads of keys' and tenants'
// settings, rebuilt whenever the tenants are.
type governance struct {
	// caps are the limited keys' and tenants' capacities, by rate name
	// (consensus.KeyRate, consensus.TenantRate).
	caps []consensus.RateCapacity
	// budgeted are the key accounts with a budget
	// (consensus.KeyAccount).
	budgeted map[string]bool
	// names are the keys' names, by account; a key without a name is
	// absent.
	names map[string]string
}

// governanceOf is the settings in force of the file's tenants ts and the
// ledger's (nil: not read), config.InForce's.
func governanceOf(ts []config.Tenant, ledger []consensus.Tenant) *governance {
	g := &governance{budgeted: map[string]bool{}, names: map[string]string{}}
	inLedger := map[string]*consensus.Tenant{}
	var order []string
	for i := range ledger {
		inLedger[ledger[i].Name] = &ledger[i]
		order = append(order, ledger[i].Name)
	}
	file := map[string]*config.Tenant{}
	for i := range ts {
		if _, ok := inLedger[ts[i].Name]; !ok {
			order = append(order, ts[i].Name)
		}
		file[ts[i].Name] = &ts[i]
	}
	for _, name := range order {
		limits, keys := config.InForce(file[name], inLedger[name])
		if limits != nil {
			g.caps = append(g.caps, consensus.RateCapacity{Provider: consensus.TenantRate(name), RPM: limits.RPM, TPM: limits.TPM})
		}
		for _, k := range keys {
			id := k.ID()
			if k.Limits != nil {
				g.caps = append(g.caps, consensus.RateCapacity{Provider: consensus.KeyRate(name, id), RPM: k.Limits.RPM, TPM: k.Limits.TPM})
			}
			if k.Budget != nil {
				g.budgeted[consensus.KeyAccount(name, id)] = true
			}
			if k.Name != "" {
				g.names[consensus.KeyAccount(name, id)] = k.Name
			}
		}
	}
	return g
}

// seedKeyCommands are the file's settings of each tenant's keys and its
// limits (consensus.CmdSeedKeys), applied by a new leader after the
// tenants: the ledger takes them where no operator changed them live.
// Each command's id holds a digest of its body, so that a changed file
// seeds again.
func seedKeyCommands(t config.Tenant) consensus.Command {
	b, _ := json.Marshal(consensus.SeedKeys{Tenant: t.Name, Limits: t.Limits, Keys: t.KeySettings})
	sum := sha256.Sum256(b)
	return consensus.Command{ID: "seed/keys/" + t.Name + "/" + hex.EncodeToString(sum[:8]), Type: consensus.CmdSeedKeys, Body: b}
}

// Subjects is this node's share of keys' and tenants' mesh-wide limits,
// taken for a request once, at the node it entered (TakeAll), by the
// names consensus.KeyRate and consensus.TenantRate give them.
func (l *Ledger) Subjects() *consensus.RateHolder { return l.subjects }

// KeyName returns the name of tenant's key of id key, "" when it has
// none.
func (l *Ledger) KeyName(tenant, key string) string {
	return l.gov.Load().names[consensus.KeyAccount(tenant, key)]
}

// ErrKeyBudget marks a refusal for a key's own budget (it also matches
// route.ErrBudgetExceeded).
var ErrKeyBudget = errors.New("the key's budget is spent")

// ReserveKey implements route.KeyBudgetGate: a key with a budget of its
// own reserves usd from it first, then from its tenant's, both within
// until; the hold settles both.
func (g budgetGate) ReserveKey(ctx context.Context, tenant, key string, usd float64, prio int, until, now time.Time) (route.BudgetHold, error) {
	account := consensus.KeyAccount(tenant, key)
	if b := *g.l.budgeted.Load(); b != nil && !b[account] {
		return g.Reserve(ctx, tenant, usd, prio, until, now)
	}
	kh, err := g.h.Reserve(ctx, account, usd, prio, until, now)
	if err != nil {
		if errors.Is(err, consensus.ErrBudgetExceeded) {
			err = keyBudgetError{err: err, name: g.l.KeyName(tenant, key), key: key}
		}
		return nil, RouteError(err)
	}
	th, err := g.h.Reserve(ctx, tenant, usd, prio, until, g.l.now())
	if err != nil {
		kh.Settle(0)
		return nil, RouteError(err)
	}
	return holds{kh, th}, nil
}

// keyBudgetError is the refusal of a key's own budget: the holder's, the
// key named by its name where it has one. It matches ErrKeyBudget.
type keyBudgetError struct {
	err       error
	name, key string
}

func (e keyBudgetError) Error() string {
	if e.name == "" {
		return e.err.Error()
	}
	return strings.Replace(e.err.Error(), "key "+e.key+" ", fmt.Sprintf("key %q ", e.name), 1)
}

func (e keyBudgetError) Unwrap() []error { return []error{ErrKeyBudget, e.err} }

// holds settles a key's reservation and its tenant's together.
type holds [2]*consensus.Hold

func (h holds) Settle(usd float64) {
	h[0].Settle(usd)
	h[1].Settle(usd)
}

var _ route.KeyBudgetGate = budgetGate{}

// setGovernance takes the keys' and tenants' settings in force with the
// ledger's tenants ts (nil: the file's alone) and hands their limits to
// the subjects' holder.
func (l *Ledger) setGovernance(ts []consensus.Tenant) *governance {
	g := governanceOf(l.fileTenants, ts)
	l.gov.Store(g)
	l.subjects.SetCapacities(g.caps)
	return g
}

// FileLimits are the keys' and tenants' limits of the file's tenants ts
// alone: what a node without the ledger holds them to, whole.
func FileLimits(ts []config.Tenant) []consensus.RateCapacity { return governanceOf(ts, nil).caps }
