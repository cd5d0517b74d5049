package tenant

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/llmesh/llmesh/consensus"
	"github.com/llmesh/llmesh/node/config"
	"github.com/llmesh/llmesh/region"
)

func sum(key string) [sha256.Size]byte { return sha256.Sum256([]byte(key)) }

func hexSum(key string) string { s := sum(key); return hex.EncodeToString(s[:]) }

// A key is carried as "Authorization: Bearer KEY" (the scheme in any
// case, the key trimmed), as "api-key: KEY" (Azure's clients) or as
// "x-api-key: KEY" (Anthropic's), in that order of precedence, and
// nothing else authenticates.
func TestAuthenticateReadsBearerApiKeyOrXApiKey(t *testing.T) {
	k := NewKeys([]config.Tenant{{Name: "a", Keys: [][sha256.Size]byte{sum("sk-a")}}, {Name: "b", Keys: [][sha256.Size]byte{sum("sk-b")}}}, nil)
	for _, c := range []struct {
		hdr  []string
		want string // "" for refused
	}{
		{[]string{"Authorization", "Bearer sk-a"}, "a"},
		{[]string{"Authorization", "bearer sk-a"}, "a"},
		{[]string{"Authorization", "BEARER   sk-a  "}, "a"},
		{[]string{"Api-Key", "sk-b"}, "b"},
		{[]string{"api-key", "sk-b"}, "b"},
		{[]string{"Authorization", "Bearer sk-a", "Api-Key", "sk-b"}, "a"},
		{[]string{"Authorization", "Basic sk-a", "Api-Key", "sk-b"}, "b"},
		{[]string{"Authorization", "Basic sk-a"}, ""},
		{[]string{"Authorization", "sk-a"}, ""},
		{[]string{"Authorization", "Bearer "}, ""},
		{[]string{"Authorization", "Bearer sk-c"}, ""},
		{[]string{"Api-Key", "sk-a "}, ""},
		{[]string{"X-Api-Key", "sk-a"}, "a"}, // Anthropic's clients
		{[]string{"Api-Key", "sk-b", "X-Api-Key", "sk-a"}, "b"},
		{[]string{"X-Api-Key", "sk-a "}, ""},
		{nil, ""},
	} {
		r := httptest.NewRequest("POST", "/v1/chat/completions", nil)
		for i := 0; i+1 < len(c.hdr); i += 2 {
			r.Header.Set(c.hdr[i], c.hdr[i+1])
		}
		got, ok := k.Authenticate(r)
		if ok != (c.want != "") || (ok && got.Name != c.want) {
			t.Errorf("%q: %v %v, want %q", c.hdr, got, ok, c.want)
		}
	}
}

// The file's and the ledger's keys both authenticate unless the ledger
// revoked them (one by one, or all the file's for a tenant); a tenant
// only the ledger knows takes its residency from it; a key listed for
// two tenants is the file's first; a malformed hash is ignored.
func TestNewKeysMergesTheFileAndTheLedger(t *testing.T) {
	eu := region.Residency{Jurisdiction: "eu"}
	file := []config.Tenant{
		{Name: "a", Residency: eu, StrictTransit: true, Priority: 1, Keys: [][sha256.Size]byte{sum("sk-a1"), sum("sk-a2"), sum("sk-shared")}},
		{Name: "b", Keys: [][sha256.Size]byte{sum("sk-b"), sum("sk-shared")}},
		{Name: "c", Keys: [][sha256.Size]byte{sum("sk-c")}},
	}
	ledger := []consensus.Tenant{
		{Name: "a", KeySHA256: []string{hexSum("sk-a3"), "not-hex", hexSum("sk-a4")[:10]}, Revoked: []string{hexSum("sk-a2"), strings.ToUpper(hexSum("sk-a3"))}},
		{Name: "c", FileKeysRevoked: true, KeySHA256: []string{hexSum("sk-c2")}},
		{Name: "new", Residency: "us", StrictTransit: true, KeySHA256: []string{hexSum("sk-new")}},
	}
	k := NewKeys(file, ledger)
	for key, want := range map[string]string{
		"sk-a1": "a", "sk-a2": "", "sk-a3": "", "sk-a4": "", "sk-shared": "a", "sk-b": "b",
		"sk-c": "", "sk-c2": "c", "sk-new": "new",
	} {
		r := httptest.NewRequest("GET", "/", nil)
		r.Header.Set("Authorization", "Bearer "+key)
		got, ok := k.Authenticate(r)
		if ok != (want != "") || (ok && got.Name != want) {
			t.Errorf("%s: %v %v, want %q", key, got, ok, want)
		}
		// Each key names itself, never another key of its tenant.
		if ok && got.Key != consensus.KeyID(hexSum(key)) {
			t.Errorf("%s: authenticated as key %q, want %q", key, got.Key, consensus.KeyID(hexSum(key)))
		}
	}
	if a, _ := k.Named("a"); a.Key != "" {
		t.Errorf("a tenant named, not authenticated, has key %q", a.Key)
	}
	if a, ok := k.Named("a"); !ok || a.Residency != eu || !a.StrictTransit || a.Priority != 1 {
		t.Errorf("a: %+v %v", a, ok)
	}
	if n, ok := k.Named("new"); !ok || n.Residency.Jurisdiction != "us" || !n.StrictTransit {
		t.Errorf("new: %+v %v", n, ok)
	}
	if _, ok := k.Named("nobody"); ok {
		t.Error("an unknown tenant is named")
	}
	// The same inputs index the same owners every time.
	for range 20 {
		r := httptest.NewRequest("GET", "/", nil)
		r.Header.Set("Api-Key", "sk-shared")
		if got, _ := NewKeys(file, ledger).Authenticate(r); got == nil || got.Name != "a" {
			t.Fatalf("sk-shared: %+v", got)
		}
	}
}

// A key's name and allow-list are the ledger's where it holds settings
// of the key, else the file's: a key only the file sets keeps the file's
// until the ledger holds some; a key the ledger set live is the ledger's
// whatever the file says; a tenant only the ledger knows has its keys'
// settings from it.
func TestKeySettingsLedgerOverFile(t *testing.T) {
	file := []config.Tenant{{Name: "a", Keys: [][sha256.Size]byte{sum("sk-1"), sum("sk-2"), sum("sk-3")}, KeySettings: []consensus.KeySettings{
		{KeySHA256: hexSum("sk-1"), Name: "one", Models: []string{"m1"}},
		{KeySHA256: hexSum("sk-2"), Name: "two-file", Models: []string{"m2"}},
	}}}
	ledger := []consensus.Tenant{
		{Name: "a", Keys: []consensus.KeySettings{{KeySHA256: hexSum("sk-2"), Name: "two", Live: true}}},
		{Name: "b", KeySHA256: []string{hexSum("sk-b")}, Keys: []consensus.KeySettings{{KeySHA256: hexSum("sk-b"), Name: "bee", Models: []string{"x"}}}},
	}
	for _, c := range []struct {
		ledger        []consensus.Tenant
		key, name     string
		models, allow string
		denied        string
	}{
		{nil, "sk-1", "one", "m1", "m1", "m2"},
		{nil, "sk-2", "two-file", "m2", "m2", "m1"},
		{ledger, "sk-1", "one", "m1", "m1", "m2"},
		{ledger, "sk-2", "two", "", "anything", ""},
		{ledger, "sk-3", "", "", "anything", ""},
		{ledger, "sk-b", "bee", "x", "x", "y"},
	} {
		k := NewKeys(file, c.ledger)
		r := httptest.NewRequest("GET", "/", nil)
		r.Header.Set("Authorization", "Bearer "+c.key)
		got, ok := k.Authenticate(r)
		if !ok || got.KeyName != c.name || strings.Join(got.Models, ",") != c.models || !got.Allows(c.allow) || (c.denied != "" && got.Allows(c.denied)) {
			t.Errorf("%s (ledger read: %v): %+v", c.key, c.ledger != nil, got)
		}
		if k.KeyName(got.Name, got.Key) != c.name {
			t.Errorf("%s: KeyName %q", c.key, k.KeyName(got.Name, got.Key))
		}
		if want := c.name; want == "" && got.KeyLabel() != got.Key || want != "" && got.KeyLabel() != want {
			t.Errorf("%s: label %q", c.key, got.KeyLabel())
		}
	}
}
