package config

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"github.com/llmesh/llmesh/region"
	"github.com/llmesh/llmesh/route"
)

func TestResolveTenants(t *testing.T) {
	sum := sha256.Sum256([]byte("test"))
	hash := hex.EncodeToString(sum[:])
	budget := &BudgetSection{USD: 5, Period: "day"}
	with := func(ts ...TenantSection) func(*File) { return func(f *File) { f.Tenants = ts } }
	testSection(t, resolveTenants, []section{resolveRegions}, []sectionCase{
		{name: "valid", edit: with(
			TenantSection{Name: "acme", KeySHA256: []string{strings.ToUpper(hash)}, Residency: "eu", StrictTransit: true, Budget: budget},
			TenantSection{Name: "batch", KeySHA256: []string{strings.Repeat("0", 64)}, Priority: "batch", MaxTTFT: Duration(time.Second)},
		), want: func(s *Runtime) {
			s.Tenants = []Tenant{
				{Name: "acme", Keys: [][sha256.Size]byte{sum}, Residency: region.Residency{Jurisdiction: "eu"}, StrictTransit: true,
					Budget: budget, Priority: route.PriorityInteractive},
				{Name: "batch", Keys: [][sha256.Size]byte{{}}, Priority: route.PriorityBatch, MaxTTFT: time.Second},
			}
		}},
		{name: "names and keys", edit: with(TenantSection{KeySHA256: []string{hash}}, TenantSection{Name: "a b"},
			TenantSection{Name: "c", KeySHA256: []string{"secret-key", hash}}, TenantSection{Name: "c", KeySHA256: []string{strings.Repeat("1", 64)}}),
			err: strings.Join([]string{"tenants[0].name: is required",
				`tenants[1].name: "a b" must be 1-64 letters, digits, '.', '_' or '-'`, "tenants[1].key_sha256: at least one key is required (in key_sha256 or keys)",
				"tenants[2].key_sha256[0]: must be 64 hex digits (the SHA-256 of the key, e.g. from `printf %s KEY | sha256sum`)",
				`tenants[2].key_sha256[1]: the same key is already given to tenant ""`, `tenants[3].name: "c" is used by another tenant`}, "\n")},
		{name: "policy", edit: with(TenantSection{Name: "a", KeySHA256: []string{hash}, Residency: "mars", Priority: "urgent", MaxTTFT: -1},
			TenantSection{Name: "b", KeySHA256: []string{strings.Repeat("1", 64)}, StrictTransit: true}),
			err: strings.Join([]string{`tenants[0].residency: "mars" is not the jurisdiction of any region`,
				`tenants[0].priority: "urgent" must be interactive or batch`, "tenants[0].max_ttft: must not be negative",
				"tenants[1].strict_transit: needs a residency: it keeps requests on nodes of the residency's jurisdiction"}, "\n")},
		{name: "budgets", edit: with(TenantSection{Name: "a", KeySHA256: []string{hash}, Budget: &BudgetSection{}},
			TenantSection{Name: "b", KeySHA256: []string{strings.Repeat("1", 64)}, Budget: &BudgetSection{USD: 1, Period: "week"}}),
			err: strings.Join([]string{"tenants[0].budget.usd: must be positive", "tenants[0].budget.period: is required (day, month or total)",
				`tenants[1].budget.period: "week" must be day, month or total`}, "\n")},
	})
}
