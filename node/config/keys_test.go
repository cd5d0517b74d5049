package config

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"

	"github.com/llmesh/llmesh/consensus"
	"github.com/llmesh/llmesh/route"
)

func TestResolveKeySettings(t *testing.T) {
	sumA, sumB := sha256.Sum256([]byte("a")), sha256.Sum256([]byte("b"))
	a, b := hex.EncodeToString(sumA[:]), hex.EncodeToString(sumB[:])
	with := func(ts ...TenantSection) func(*File) { return func(f *File) { f.Tenants = ts } }
	testSection(t, resolveTenants, []section{resolveRegions}, []sectionCase{
		{name: "a tenant with keys only, one also in key_sha256", edit: with(TenantSection{Name: "acme", KeySHA256: []string{a},
			Limits: &RateSection{RPM: 1200, TPM: 2000000},
			Keys: []KeySection{
				{Name: "app-b", KeySHA256: strings.ToUpper(b), Models: []string{"llama-3-8b", "smart"}, Limits: &RateSection{RPM: 120},
					Budget: &BudgetSection{USD: 50, Period: "month"}},
				{KeySHA256: a, Limits: &RateSection{}},
			}}), want: func(s *Runtime) {
			s.Tenants = []Tenant{{Name: "acme", Keys: [][sha256.Size]byte{sumA, sumB}, Priority: route.PriorityInteractive,
				Limits: &consensus.Limits{RPM: 1200, TPM: 2000000},
				KeySettings: []consensus.KeySettings{
					{KeySHA256: b, Name: "app-b", Models: []string{"llama-3-8b", "smart"}, Limits: &consensus.Limits{RPM: 120},
						Budget: &consensus.Budget{Limit: 50 * consensus.NanosPerUSD, Period: "month"}},
					{KeySHA256: a},
				}}}
		}},
		{name: "keys' errors", edit: with(
			TenantSection{Name: "acme", Limits: &RateSection{RPM: -1}, Keys: []KeySection{
				{KeySHA256: "nope"},
				{Name: "a b", KeySHA256: a, Models: []string{"m", "", "m"}, Limits: &RateSection{TPM: -5}, Budget: &BudgetSection{USD: 1}},
				{Name: "dup", KeySHA256: a},
				{Name: "dup", KeySHA256: strings.Repeat("1", 64)},
			}},
			TenantSection{Name: "globex", Keys: []KeySection{{KeySHA256: a}}}),
			err: strings.Join([]string{
				"tenants[0].limits.rpm: must not be negative",
				"tenants[0].keys[0].key_sha256: must be 64 hex digits (the SHA-256 of the key, e.g. from `printf %s KEY | sha256sum`)",
				`tenants[0].keys[1].name: "a b" must be 1-64 letters, digits, '.', '_' or '-'`,
				"tenants[0].keys[1].models[1]: is empty: name a model or group",
				`tenants[0].keys[1].models[2]: "m" is listed twice`,
				"tenants[0].keys[1].budget.period: is required (day, month or total)",
				"tenants[0].keys[1].limits.tpm: must not be negative",
				"tenants[0].keys[2].key_sha256: the same key has settings twice in the tenant's keys",
				`tenants[0].keys[3].name: "dup" names another key of the tenant`,
				`tenants[1].keys[0].key_sha256: the same key is already given to tenant "acme"`,
			}, "\n")},
		{name: "no key at all", edit: with(TenantSection{Name: "acme", Limits: &RateSection{RPM: 1}}),
			err: "tenants[0].key_sha256: at least one key is required (in key_sha256 or keys)"},
	})
}

func TestKeyBudgetNeedsTheLedger(t *testing.T) {
	testSection(t, resolveLedger, []section{resolveGossip}, []sectionCase{
		{name: "key budget without ledger", edit: func(f *File) {
			f.Tenants = []TenantSection{{Name: "a", Keys: []KeySection{{KeySHA256: strings.Repeat("1", 64), Budget: &BudgetSection{USD: 1, Period: "day"}}}}}
		}, err: "tenants[0].keys[0].budget: needs the Raft ledger: make this node a voter (node.voter) or let it find voters (node.gossip)"},
		{name: "key budget with a voter", edit: func(f *File) {
			f.Node.Voter = true
			f.Tenants = []TenantSection{{Name: "a", Keys: []KeySection{{KeySHA256: strings.Repeat("1", 64), Budget: &BudgetSection{USD: 1, Period: "day"}}}}}
		}, want: func(s *Runtime) { s.Ledger = true }},
	})
}
