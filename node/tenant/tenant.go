// Package tenant authenticates a request's API key and names the tenant
// it is from. Only the SHA-256 sums of keys are held: the configuration
// file's and, once the node has read them, the ledger's (keys added with
// llmesh tenants, and revocations). Authentication compares whole sums
// in constant time. The admin API that changes the ledger's keys is the
// node's.
package tenant

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/binary"
	"encoding/hex"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/llmesh/llmesh/consensus"
	"github.com/llmesh/llmesh/node/config"
	"github.com/llmesh/llmesh/region"
)

// Tenant is who a request is from, once authenticated.
type Tenant struct {
	Name      string
	Residency region.Residency
	// StrictTransit keeps the tenant's requests on nodes of its
	// residency's jurisdiction.
	StrictTransit bool
	// Priority orders its requests waiting for admission (route's
	// PriorityInteractive or PriorityBatch), from this node's file.
	Priority int
	// MaxTTFT is its time-to-first-token objective, from this node's
	// file; zero: none.
	MaxTTFT time.Duration
	// Key is the id of the API key the request was authenticated with
	// (consensus.KeyID of its SHA-256); "" for a tenant named rather
	// than authenticated (Named).
	Key string
	// KeyName is the key's name, "" when it has none; Models the models
	// (or groups) the key may ask for, by the name the client sends,
	// empty for every model. The ledger's settings of the key where it
	// holds some, else the file's.
	KeyName string
	Models  []string
}

// Allows reports whether t's key may ask for model (a model group
// counts as one model, by its name).
func (t *Tenant) Allows(model string) bool {
	return len(t.Models) == 0 || slices.Contains(t.Models, model)
}

// KeyLabel names t's key where the key itself must not appear: its
// name, else its id.
func (t *Tenant) KeyLabel() string {
	if t.KeyName != "" {
		return t.KeyName
	}
	return t.Key
}

// Keys authenticates API keys against the SHA-256 hashes of the
// configured keys. Only hashes are held.
type Keys struct {
	// byPrefix indexes key hashes by their first eight bytes.
	byPrefix map[uint64][]keyEntry
	byName   map[string]*Tenant
	// keyNames are the keys' names, by tenant and id
	// (consensus.KeyAccount).
	keyNames map[string]string
}

type keyEntry struct {
	sum    [sha256.Size]byte
	tenant *Tenant
}

// NewKeys indexes the configuration's tenants and, once the node
// has read them, the ledger's: a key is valid when either lists it and
// the ledger has not revoked it. Tenants only the ledger knows (made by
// llmesh tenants add) take their residency from it.
func NewKeys(ts []config.Tenant, ledger []consensus.Tenant) *Keys {
	k := &Keys{byPrefix: map[uint64][]keyEntry{}, byName: map[string]*Tenant{}, keyNames: map[string]string{}}
	revoked := map[[sha256.Size]byte]bool{}
	fileRevoked := map[string]bool{}
	for _, lt := range ledger {
		for _, h := range lt.Revoked {
			if sum, ok := decodeKeyHash(h); ok {
				revoked[sum] = true
			}
		}
		fileRevoked[lt.Name] = lt.FileKeysRevoked
	}
	// Tenants in a fixed order, the file's first: a key listed for two
	// tenants belongs to the first, the same one at every refresh.
	var order []string
	keys := map[string][][sha256.Size]byte{}
	settings := keySettings(ts, ledger)
	for _, t := range ts {
		k.byName[t.Name] = &Tenant{Name: t.Name, Residency: t.Residency, StrictTransit: t.StrictTransit, Priority: t.Priority, MaxTTFT: t.MaxTTFT}
		order = append(order, t.Name)
		if !fileRevoked[t.Name] {
			keys[t.Name] = append(keys[t.Name], t.Keys...)
		}
	}
	for _, lt := range ledger {
		if k.byName[lt.Name] == nil {
			order = append(order, lt.Name)
			k.byName[lt.Name] = &Tenant{Name: lt.Name, Residency: region.Residency{Jurisdiction: region.Jurisdiction(lt.Residency)}, StrictTransit: lt.StrictTransit}
		}
		for _, h := range lt.KeySHA256 {
			if sum, ok := decodeKeyHash(h); ok {
				keys[lt.Name] = append(keys[lt.Name], sum)
			}
		}
	}
	owner := map[[sha256.Size]byte]bool{}
	for _, name := range order {
		for _, h := range keys[name] {
			if revoked[h] || owner[h] {
				continue
			}
			owner[h] = true
			p := binary.BigEndian.Uint64(h[:8])
			t := *k.byName[name] // each key's own, naming the key
			hx := hex.EncodeToString(h[:])
			t.Key = consensus.KeyID(hx)
			if ks, ok := settings[hx]; ok {
				t.KeyName, t.Models = ks.Name, ks.Models
				if ks.Name != "" {
					k.keyNames[consensus.KeyAccount(name, t.Key)] = ks.Name
				}
			}
			k.byPrefix[p] = append(k.byPrefix[p], keyEntry{sum: h, tenant: &t})
		}
	}
	return k
}

// keySettings indexes the settings in force of every tenant's keys by
// hash (config.InForce: the ledger's, else the file's).
func keySettings(ts []config.Tenant, ledger []consensus.Tenant) map[string]consensus.KeySettings {
	out := map[string]consensus.KeySettings{}
	inLedger := map[string]*consensus.Tenant{}
	for i := range ledger {
		inLedger[ledger[i].Name] = &ledger[i]
	}
	for i := range ts {
		_, keys := config.InForce(&ts[i], inLedger[ts[i].Name])
		for _, ks := range keys {
			out[ks.KeySHA256] = ks
		}
		delete(inLedger, ts[i].Name)
	}
	for _, lt := range inLedger { // tenants only the ledger knows
		for _, ks := range lt.Keys {
			out[ks.KeySHA256] = ks
		}
	}
	return out
}

func decodeKeyHash(h string) (sum [sha256.Size]byte, ok bool) {
	n, err := hex.Decode(sum[:], []byte(h))
	return sum, err == nil && n == sha256.Size
}

// Authenticate returns the tenant whose key the request carries, as
// "Authorization: Bearer KEY" (OpenAI SDKs), "api-key: KEY" (Azure SDKs)
// or "x-api-key: KEY" (Anthropic SDKs), in that order of precedence.
//
// The key is hashed; candidates are found by the hash's first eight bytes
// and the whole hash is compared in constant time. The lookup's timing
// depends only on the hash of what the caller sent, which tells nothing
// about any valid key (that would take a preimage of SHA-256).
func (k *Keys) Authenticate(r *http.Request) (*Tenant, bool) {
	key := Bearer(r.Header.Get("Authorization"))
	if key == "" {
		key = r.Header.Get("Api-Key")
	}
	if key == "" {
		key = r.Header.Get("X-Api-Key") // Anthropic's clients
	}
	return k.Lookup(key)
}

// Lookup returns the tenant whose API key is key (the key itself), as
// Authenticate does.
func (k *Keys) Lookup(key string) (*Tenant, bool) {
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

// KeyName returns the name of tenant's key of id key, "" when it has
// none (or the key is not known here).
func (k *Keys) KeyName(tenant, key string) string {
	return k.keyNames[consensus.KeyAccount(tenant, key)]
}

// Named returns the tenant called name, as a forwarding node names it.
func (k *Keys) Named(name string) (*Tenant, bool) {
	t, ok := k.byName[name]
	return t, ok
}

// Bearer returns the credential of an Authorization header of the
// "Bearer" scheme (matched in any case), trimmed; "" for any other.
func Bearer(h string) string {
	const p = "bearer "
	if len(h) > len(p) && strings.EqualFold(h[:len(p)], p) {
		return strings.TrimSpace(h[len(p):])
	}
	return ""
}
