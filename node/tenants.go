package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/llmesh/llmesh/consensus"
	"github.com/llmesh/llmesh/node/config"
	"github.com/llmesh/llmesh/node/ledger"
	"github.com/llmesh/llmesh/node/views"
	"github.com/llmesh/llmesh/region"
	"github.com/llmesh/llmesh/route"
)

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
		ti.Limits, ti.KeySettings = keySettingsView(&t)
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
	n.applyAdmin(w, r, consensus.CmdRevokeKey, req, map[string]any{"tenant": req.Tenant, "revoked": true, "within_s": (ledger.TenantRefresh + 2*time.Second).Seconds()})
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
// or the error in OpenAI's shape: 409 ledger_upgrade_required when the
// command needs a ledger version the voters have not agreed on yet.
func (n *Node) applyAdmin(w http.ResponseWriter, r *http.Request, typ string, body any, ok map[string]any) {
	if n.ledger == nil {
		n.writeError(w, errNoLedger)
		return
	}
	b, _ := json.Marshal(body)
	// Right after a start no leader may be known yet: the write waits for
	// one as a read does. Retrying is safe, as a command that found no
	// leader was not applied (and one id is applied once).
	cmd := consensus.Command{ID: newCommandID(n.s.Name), Type: typ, Body: b}
	var res consensus.Result
	err := withLeader(r.Context(), func(ctx context.Context) (err error) {
		res, err = n.ledger.Client().Apply(ctx, cmd)
		return err
	})
	switch {
	case errors.Is(err, consensus.ErrLedgerVersion):
		// Refused until every voter reads it: 409, with the voters to
		// upgrade named.
		n.writeError(w, err)
	case err != nil:
		n.writeError(w, fmt.Errorf("%w: %v", errLedgerUnavailable, err))
	case strings.Contains(res.Err, consensus.ErrNoTenant.Error()):
		n.writeError(w, fmt.Errorf("%w: %s", errNoSuchTenant, res.Err))
	case res.Err != "":
		n.writeError(w, &route.InvalidRequestError{Msg: res.Err})
	default:
		n.ledger.RefreshTenants() // the change holds here within a read of the leader
		writeJSON(w, http.StatusOK, ok)
	}
}
