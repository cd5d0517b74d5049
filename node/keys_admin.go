package node

// The admin API of keys' settings and tenants' limits: changed live in
// the ledger, read back by every node within a tenant refresh.

import (
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/llmesh/llmesh/consensus"
	"github.com/llmesh/llmesh/node/config"
	"github.com/llmesh/llmesh/node/ledger"
	"github.com/llmesh/llmesh/node/views"
	"github.com/llmesh/llmesh/route"
)

// keyRoutes adds the admin endpoints of keys' settings and tenants'
// limits to mux.
func (n *Node) keyRoutes(mux *http.ServeMux) {
	mux.HandleFunc("/v1/mesh/tenants/{tenant}/keys/{key}", n.only(http.MethodPut, n.admin(n.setKeySettings)))
	mux.HandleFunc("/v1/mesh/tenants/{tenant}/limits", n.admin(func(w http.ResponseWriter, r *http.Request) {
		switch r.Method {
		case http.MethodPut, http.MethodDelete:
			n.setTenantLimits(w, r)
		default:
			w.Header()["Allow"] = []string{"PUT, DELETE"}
			n.writeError(w, errMethod)
		}
	}))
}

// within is how soon every node that reaches a voter applies a change of
// the ledger's tenants: a refresh and a read.
var within = (ledger.TenantRefresh + 2*time.Second).Seconds()

// setKeySettings serves PUT /v1/mesh/tenants/{tenant}/keys/{key}, the key
// named by its name, its id or its whole SHA-256:
// {"name": N, "models": [...], "rpm": N, "tpm": N, "budget": {"usd": X, "period": P}, "clear_budget": true}.
// What is given changes; "" (a name), [] (models) and 0 (a limit) take
// a setting away.
func (n *Node) setKeySettings(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Name   *string   `json:"name"`
		Models *[]string `json:"models"`
		RPM    *int64    `json:"rpm"`
		TPM    *int64    `json:"tpm"`
		Budget *struct {
			USD    float64 `json:"usd"`
			Period string  `json:"period"`
		} `json:"budget"`
		ClearBudget bool `json:"clear_budget"`
	}
	shape := `{"name": NAME, "models": [MODEL, ...], "rpm": N, "tpm": N, "budget": {"usd": USD, "period": "day|month|total"}, "clear_budget": BOOL}`
	if !n.readAdminJSON(w, r, &req, shape) {
		return
	}
	key := r.PathValue("key")
	if k := strings.ToLower(key); len(k) == 64 && strings.Trim(k, "0123456789abcdef") == "" {
		key = k // a whole SHA-256, as some tools print it; a name is as spelled
	}
	if _, ok := n.tenants.Load().Lookup(key); ok {
		// The key itself, pasted: it must not reach the ledger, nor be
		// echoed.
		n.writeError(w, &route.InvalidRequestError{Param: "key", Msg: "that is an API key itself, which never goes to the ledger: " +
			"name the key by its name, its id (llmesh tenants keys list) or its SHA-256"})
		return
	}
	cmd := consensus.SetKey{Tenant: r.PathValue("tenant"), Key: key, Name: req.Name, Models: req.Models,
		RPM: req.RPM, TPM: req.TPM, ClearBudget: req.ClearBudget}
	if req.Name != nil && *req.Name != "" && !config.ValidName(*req.Name) {
		n.writeError(w, &route.InvalidRequestError{Param: "name", Msg: "must be 1-64 letters, digits, '.', '_' or '-'"})
		return
	}
	if err := checkLimits(req.RPM, req.TPM); err != nil {
		n.writeError(w, err)
		return
	}
	if b := req.Budget; b != nil {
		if b.USD <= 0 || (b.Period != consensus.PeriodDay && b.Period != consensus.PeriodMonth && b.Period != consensus.PeriodTotal) {
			n.writeError(w, &route.InvalidRequestError{Param: "budget", Msg: "needs a positive usd and a period: day, month or total"})
			return
		}
		cmd.Budget = &consensus.Budget{Limit: consensus.RoundNanos(b.USD), Period: b.Period}
	}
	ok := map[string]any{"tenant": cmd.Tenant, "key": r.PathValue("key"), "within_s": within}
	if req.Models != nil {
		var unknown []string
		for _, m := range *req.Models {
			if !n.catalog().Serves(m) {
				unknown = append(unknown, m)
			}
		}
		if len(unknown) > 0 {
			// Not refused: another node may serve them, or this one after
			// a reload.
			ok["not_served_here"] = unknown
		}
	}
	n.applyAdmin(w, r, consensus.CmdSetKey, cmd, ok)
}

// setTenantLimits serves PUT /v1/mesh/tenants/{tenant}/limits {"rpm": N,
// "tpm": N} (what is given changes; 0 takes a limit away) and DELETE,
// which takes both away.
func (n *Node) setTenantLimits(w http.ResponseWriter, r *http.Request) {
	var req struct {
		RPM *int64 `json:"rpm"`
		TPM *int64 `json:"tpm"`
	}
	if r.Method == http.MethodDelete {
		var zero int64
		req.RPM, req.TPM = &zero, &zero
	} else if !n.readAdminJSON(w, r, &req, `{"rpm": N, "tpm": N}`) {
		return
	}
	if err := checkLimits(req.RPM, req.TPM); err != nil {
		n.writeError(w, err)
		return
	}
	cmd := consensus.SetTenantLimits{Tenant: r.PathValue("tenant"), RPM: req.RPM, TPM: req.TPM}
	n.applyAdmin(w, r, consensus.CmdSetTenantLimits, cmd, map[string]any{"tenant": cmd.Tenant, "within_s": within})
}

func checkLimits(rpm, tpm *int64) error {
	for _, l := range []struct {
		name string
		v    *int64
	}{{"rpm", rpm}, {"tpm", tpm}} {
		if l.v != nil && *l.v < 0 {
			return &route.InvalidRequestError{Param: l.name, Msg: fmt.Sprintf("%d must not be negative (0 takes the limit away)", *l.v)}
		}
	}
	return nil
}

// keySettingsView is a tenant's limits and keys' settings as operators
// see them.
func keySettingsView(t *consensus.Tenant) (*views.LimitsInfo, []views.KeyInfo) {
	var lim *views.LimitsInfo
	if t.Limits != nil {
		lim = &views.LimitsInfo{RPM: t.Limits.RPM, TPM: t.Limits.TPM}
	}
	var keys []views.KeyInfo
	for _, k := range t.Keys {
		ki := views.KeyInfo{ID: k.ID(), Name: k.Name, Models: append([]string{}, k.Models...), Source: "file"}
		if k.Live {
			ki.Source = "live"
		}
		if k.Limits != nil {
			ki.Limits = &views.LimitsInfo{RPM: k.Limits.RPM, TPM: k.Limits.TPM}
		}
		if k.Budget != nil {
			usd := k.Budget.Limit.USD()
			ki.BudgetUSD, ki.BudgetPeriod = &usd, k.Budget.Period
		}
		keys = append(keys, ki)
	}
	return lim, keys
}
