package node

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/llmesh/llmesh/consensus"
	"github.com/llmesh/llmesh/node/config"
	"github.com/llmesh/llmesh/node/views"
	"github.com/llmesh/llmesh/region"
	"github.com/llmesh/llmesh/route"
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

// newTenantKeys indexes the configuration's tenants and, once the node
// has read them, the ledger's: a key is valid when either lists it and
// the ledger has not revoked it. Tenants only the ledger knows (made by
// llmesh tenants add) take their residency from it.
func newTenantKeys(ts []config.Tenant, ledger []consensus.Tenant) *tenantKeys {
	k := &tenantKeys{byPrefix: map[uint64][]keyEntry{}, byName: map[string]*Tenant{}}
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
	for _, t := range ts {
		k.byName[t.Name] = &Tenant{Name: t.Name, Residency: t.Residency, StrictTransit: t.StrictTransit, Priority: t.Priority}
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
			k.byPrefix[p] = append(k.byPrefix[p], keyEntry{sum: h, tenant: k.byName[name]})
		}
	}
	return k
}

func decodeKeyHash(h string) (sum [sha256.Size]byte, ok bool) {
	n, err := hex.Decode(sum[:], []byte(h))
	return sum, err == nil && n == sha256.Size
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

// tenantsList serves GET /v1/mesh/tenants: the ledger's tenants, read
// through the leader.
func (n *Node) tenantsList(w http.ResponseWriter, r *http.Request) {
	var ts []consensus.Tenant
	if _, ok := n.readLedgerView(w, r, "tenants", true, &ts); !ok {
		return
	}
	out := []views.TenantInfo{}
	for _, t := range ts {
		ti := views.TenantInfo{Name: t.Name, Residency: t.Residency, StrictTransit: t.StrictTransit, Keys: []string{}, Revoked: []string{}}
		for _, h := range t.KeySHA256 {
			ti.Keys = append(ti.Keys, consensus.KeyID(h))
		}
		for _, h := range t.Revoked {
			ti.Revoked = append(ti.Revoked, consensus.KeyID(h))
		}
		if t.Budget != nil {
			usd := t.Budget.Limit.USD()
			ti.BudgetUSD, ti.BudgetPeriod = &usd, t.Budget.Period
		}
		out = append(out, ti)
	}
	writeJSON(w, http.StatusOK, views.Tenants{Tenants: out})
}

// addTenantKey serves POST /v1/mesh/tenants/{tenant}/keys
// {"key_sha256": HEX, "create": true, "residency": "eu", "strict_transit": false}:
// the key's hash joins the tenant (created when asked and absent). The
// key itself never reaches the node: llmesh tenants makes it and sends
// its hash.
func (n *Node) addTenantKey(w http.ResponseWriter, r *http.Request) {
	var req struct {
		KeySHA256     string `json:"key_sha256"`
		Create        bool   `json:"create"`
		Residency     string `json:"residency"`
		StrictTransit bool   `json:"strict_transit"`
	}
	if !n.readAdminJSON(w, r, &req, `{"key_sha256": HEX, "create": BOOL, "residency": JURISDICTION}`) {
		return
	}
	tenant := r.PathValue("tenant")
	if !config.ValidName(tenant) {
		n.writeError(w, &route.InvalidRequestError{Param: "tenant", Msg: "must be 1-64 letters, digits, '.', '_' or '-'"})
		return
	}
	if req.Residency != "" && !slices.Contains(n.s.Regions.Jurisdictions(), region.Jurisdiction(req.Residency)) {
		n.writeError(w, &route.InvalidRequestError{Param: "residency", Msg: fmt.Sprintf("%q is not the jurisdiction of any region", req.Residency)})
		return
	}
	cmd := consensus.AddKey{Tenant: tenant, KeySHA256: strings.ToLower(req.KeySHA256)}
	if req.Create {
		cmd.Create = &consensus.Tenant{Residency: req.Residency, StrictTransit: req.StrictTransit}
	}
	n.applyAdmin(w, r, consensus.CmdAddKey, cmd, map[string]any{"tenant": tenant, "key": consensus.KeyID(cmd.KeySHA256)})
}

// revokeTenantKeys serves POST /v1/mesh/tenants/{tenant}/revoke
// {"keys": [ID or HEX, ...]} or {"all": true}.
func (n *Node) revokeTenantKeys(w http.ResponseWriter, r *http.Request) {
	var req consensus.RevokeKey
	if !n.readAdminJSON(w, r, &req, `{"keys": [KEY_ID, ...]} or {"all": true}`) {
		return
	}
	req.Tenant = r.PathValue("tenant")
	n.applyAdmin(w, r, consensus.CmdRevokeKey, req, map[string]any{"tenant": req.Tenant, "revoked": true, "within_s": (tenantRefresh + 2*time.Second).Seconds()})
}

// readAdminJSON reads an admin request's small JSON body into v, or
// answers 400 with the expected shape.
func (n *Node) readAdminJSON(w http.ResponseWriter, r *http.Request, v any, shape string) bool {
	body, err := io.ReadAll(io.LimitReader(r.Body, 64<<10))
	if err != nil || json.Unmarshal(body, v) != nil {
		n.writeError(w, &route.InvalidRequestError{Msg: "the body must be " + shape})
		return false
	}
	return true
}

// applyAdmin applies an operator's command to the ledger and answers ok,
// or the error in OpenAI's shape.
func (n *Node) applyAdmin(w http.ResponseWriter, r *http.Request, typ string, body any, ok map[string]any) {
	if n.ledger == nil {
		n.writeError(w, errNoLedger)
		return
	}
	b, _ := json.Marshal(body)
	res, err := n.ledger.client.Apply(r.Context(), consensus.Command{ID: newCommandID(n.s.Name), Type: typ, Body: b})
	switch {
	case err != nil:
		n.writeError(w, fmt.Errorf("%w: %v", errLedgerUnavailable, err))
	case strings.Contains(res.Err, consensus.ErrNoTenant.Error()):
		n.writeError(w, fmt.Errorf("%w: %s", errNoSuchTenant, res.Err))
	case res.Err != "":
		n.writeError(w, &route.InvalidRequestError{Msg: res.Err})
	default:
		writeJSON(w, http.StatusOK, ok)
	}
}
