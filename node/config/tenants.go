package config

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/llmesh/llmesh/region"
	"github.com/llmesh/llmesh/route"
)

// resolveTenants checks each tenant and decodes its key hashes; a key
// may belong to one tenant only.
func resolveTenants(c *File, _ Env, s *Runtime, p *problems) {
	names := map[string]bool{}
	keyOwner := map[[sha256.Size]byte]string{}
	known := s.Regions.Jurisdictions()
	for i, t := range c.Tenants {
		f := fmt.Sprintf("tenants[%d]", i)
		switch {
		case t.Name == "":
			p.bad(f+".name", "is required")
		case !nodeNamePattern.MatchString(t.Name):
			p.bad(f+".name", "%q must be 1-64 letters, digits, '.', '_' or '-'", t.Name)
		case names[t.Name]:
			p.bad(f+".name", "%q is used by another tenant", t.Name)
		}
		names[t.Name] = true
		tt := Tenant{Name: t.Name, StrictTransit: t.StrictTransit, Budget: t.Budget}
		tt.Keys = tenantKeys(f, &t, keyOwner, p)
		resolveKeySettings(f, &t, &tt, keyOwner, p)
		if t.Residency != "" {
			if !slices.Contains(known, region.Jurisdiction(t.Residency)) {
				p.bad(f+".residency", "%q is not the jurisdiction of any region", t.Residency)
			}
			tt.Residency = region.Residency{Jurisdiction: region.Jurisdiction(t.Residency)}
		}
		if t.StrictTransit && t.Residency == "" {
			p.bad(f+".strict_transit", "needs a residency: it keeps requests on nodes of the residency's jurisdiction")
		}
		switch t.Priority {
		case "", "interactive":
			tt.Priority = route.PriorityInteractive
		case "batch":
			tt.Priority = route.PriorityBatch
		default:
			p.bad(f+".priority", "%q must be interactive or batch", t.Priority)
		}
		if t.MaxTTFT < 0 {
			p.bad(f+".max_ttft", "must not be negative")
		}
		tt.MaxTTFT = time.Duration(t.MaxTTFT)
		checkBudget(f, t.Budget, p)
		s.Tenants = append(s.Tenants, tt)
	}
}

// tenantKeys decodes a tenant's key hashes, recording in keyOwner which
// tenant each belongs to.
func tenantKeys(f string, t *TenantSection, keyOwner map[[sha256.Size]byte]string, p *problems) [][sha256.Size]byte {
	if len(t.KeySHA256) == 0 && len(t.Keys) == 0 {
		p.bad(f+".key_sha256", "at least one key is required (in key_sha256 or keys)")
	}
	var keys [][sha256.Size]byte
	for j, h := range t.KeySHA256 {
		kf := fmt.Sprintf("%s.key_sha256[%d]", f, j)
		if !sha256Pattern.MatchString(h) {
			p.bad(kf, "must be 64 hex digits (the SHA-256 of the key, e.g. from `printf %%s KEY | sha256sum`)")
			continue
		}
		var sum [sha256.Size]byte
		_, _ = hex.Decode(sum[:], []byte(strings.ToLower(h)))
		if owner, dup := keyOwner[sum]; dup {
			p.bad(kf, "the same key is already given to tenant %q", owner)
		}
		keyOwner[sum] = t.Name
		keys = append(keys, sum)
	}
	return keys
}

// checkBudget checks a tenant's budget, if it has one.
func checkBudget(f string, b *BudgetSection, p *problems) {
	if b == nil {
		return
	}
	if b.USD <= 0 {
		p.bad(f+".budget.usd", "must be positive")
	}
	switch b.Period {
	case "day", "month", "total":
	case "":
		p.bad(f+".budget.period", "is required (day, month or total)")
	default:
		p.bad(f+".budget.period", "%q must be day, month or total", b.Period)
	}
}
