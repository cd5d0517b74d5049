package node

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/binary"
	"net/http"
	"strings"

	"github.com/llmesh/llmesh/region"
)

// Tenant is who a request is from, once authenticated.
type Tenant struct {
	Name      string
	Residency region.Residency
	// StrictTransit keeps the tenant's requests on nodes of its
	// residency's jurisdiction.
	StrictTransit bool
}

// tenantKeys authenticates API keys against the SHA-256 hashes of the
// configured keys. Only hashes are held.
type tenantKeys struct {
	// byPrefix indexes key hashes by their first eight bytes.
	byPrefix map[uint64][]keyEntry
	byName   map[string]*Tenant
}

type keyEntry struct {
	sum    [sha256.Size]byte
	tenant *Tenant
}

func newTenantKeys(ts []tenant) *tenantKeys {
	k := &tenantKeys{byPrefix: map[uint64][]keyEntry{}, byName: map[string]*Tenant{}}
	for _, t := range ts {
		tt := &Tenant{Name: t.name, Residency: t.residency, StrictTransit: t.strict}
		k.byName[t.name] = tt
		for _, h := range t.keys {
			p := binary.BigEndian.Uint64(h[:8])
			k.byPrefix[p] = append(k.byPrefix[p], keyEntry{sum: h, tenant: tt})
		}
	}
	return k
}

// authenticate returns the tenant whose key the request carries, as
// "Authorization: Bearer KEY" (OpenAI SDKs) or "api-key: KEY" (Azure SDKs).
//
// The key is hashed; candidates are found by the hash's first eight bytes
// and the whole hash is compared in constant time. The lookup's timing
// depends only on the hash of what the caller sent, which tells nothing
// about any valid key (that would take a preimage of SHA-256).
func (k *tenantKeys) authenticate(r *http.Request) (*Tenant, bool) {
	key := bearer(r.Header.Get("Authorization"))
	if key == "" {
		key = r.Header.Get("Api-Key")
	}
	if key == "" {
		return nil, false
	}
	sum := sha256.Sum256([]byte(key))
	for _, e := range k.byPrefix[binary.BigEndian.Uint64(sum[:8])] {
		if subtle.ConstantTimeCompare(e.sum[:], sum[:]) == 1 {
			return e.tenant, true
		}
	}
	return nil, false
}

// named returns the tenant called name, as a forwarding node names it.
func (k *tenantKeys) named(name string) (*Tenant, bool) {
	t, ok := k.byName[name]
	return t, ok
}

func bearer(h string) string {
	const p = "bearer "
	if len(h) > len(p) && strings.EqualFold(h[:len(p)], p) {
		return strings.TrimSpace(h[len(p):])
	}
	return ""
}
