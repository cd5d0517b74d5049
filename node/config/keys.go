package config

// A tenant's mesh-wide limits and its keys' own settings (tenants[].limits
// and tenants[].keys), resolved into the ledger's shapes they seed.

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"

	"github.com/llmesh/llmesh/consensus"
)

// resolveKeySettings checks the tenant t's limits and keys (field f is
// tenants[i]) into tt. A key listed in keys authenticates as one in
// key_sha256 does; it may be in both, but in one tenant only.
//
// A key's models are not checked against the providers: the allow-list
// lives in the ledger, mesh-wide, and other nodes (or this one after a
// reload) may serve models this file does not; the node logs a warning
// for a name none of its providers or groups serves.
func resolveKeySettings(f string, t *TenantSection, tt *Tenant, keyOwner map[[sha256.Size]byte]string, p *problems) {
	tt.Limits = limitsOf(f+".limits", t.Limits, p)
	names := map[string]bool{}
	listed := map[[sha256.Size]byte]bool{}
	for j, k := range t.Keys {
		kf := fmt.Sprintf("%s.keys[%d]", f, j)
		if !sha256Pattern.MatchString(k.KeySHA256) {
			p.bad(kf+".key_sha256", "must be 64 hex digits (the SHA-256 of the key, e.g. from `printf %%s KEY | sha256sum`)")
			continue
		}
		h := strings.ToLower(k.KeySHA256)
		var sum [sha256.Size]byte
		_, _ = hex.Decode(sum[:], []byte(h))
		switch owner, known := keyOwner[sum]; {
		case listed[sum]:
			p.bad(kf+".key_sha256", "the same key has settings twice in the tenant's keys")
		case known && owner != t.Name:
			p.bad(kf+".key_sha256", "the same key is already given to tenant %q", owner)
		case !known:
			keyOwner[sum] = t.Name
			tt.Keys = append(tt.Keys, sum)
		}
		listed[sum] = true
		if k.Name != "" {
			if !ValidName(k.Name) {
				p.bad(kf+".name", "%q must be 1-64 letters, digits, '.', '_' or '-'", k.Name)
			} else if names[k.Name] {
				p.bad(kf+".name", "%q names another key of the tenant", k.Name)
			}
			names[k.Name] = true
		}
		for m, model := range k.Models {
			switch {
			case strings.TrimSpace(model) == "":
				p.bad(fmt.Sprintf("%s.models[%d]", kf, m), "is empty: name a model or group")
			case slices.Contains(k.Models[:m], model):
				p.bad(fmt.Sprintf("%s.models[%d]", kf, m), "%q is listed twice", model)
			}
		}
		checkBudget(kf, k.Budget, p)
		ks := consensus.KeySettings{KeySHA256: h, Name: k.Name, Models: slices.Clone(k.Models), Limits: limitsOf(kf+".limits", k.Limits, p)}
		if b := k.Budget; b != nil {
			ks.Budget = &consensus.Budget{Limit: consensus.RoundNanos(b.USD), Period: b.Period}
		}
		tt.KeySettings = append(tt.KeySettings, ks)
	}
}

// limitsOf checks mesh-wide limits (field f); nil when they limit
// nothing.
func limitsOf(f string, r *RateSection, p *problems) *consensus.Limits {
	if r == nil {
		return nil
	}
	if r.RPM < 0 {
		p.bad(f+".rpm", "must not be negative")
	}
	if r.TPM < 0 {
		p.bad(f+".tpm", "must not be negative")
	}
	if r.RPM <= 0 && r.TPM <= 0 {
		return nil
	}
	return &consensus.Limits{RPM: int64(max(r.RPM, 0)), TPM: int64(max(r.TPM, 0))}
}

// InForce returns a tenant's limits and keys' settings as they hold:
// the ledger's view lt of the tenant where it holds some (an operator's
// live change, or a file's seed), else the file's f. Either may be nil:
// f for a tenant only the ledger knows, lt before the ledger is read or
// when it does not hold the tenant. The keys come sorted by hash.
func InForce(f *Tenant, lt *consensus.Tenant) (*consensus.Limits, []consensus.KeySettings) {
	var limits *consensus.Limits
	var keys []consensus.KeySettings
	if f != nil {
		limits = f.Limits
	}
	if lt != nil {
		if lt.Limits != nil || lt.LimitsLive {
			limits = lt.Limits
		}
		keys = append(keys, lt.Keys...)
	}
	if f != nil {
		for _, k := range f.KeySettings {
			if lt == nil || lt.Key(k.KeySHA256) == nil {
				keys = append(keys, k)
			}
		}
	}
	slices.SortFunc(keys, func(a, b consensus.KeySettings) int { return strings.Compare(a.KeySHA256, b.KeySHA256) })
	return limits, keys
}
