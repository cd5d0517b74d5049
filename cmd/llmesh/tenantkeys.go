package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"text/tabwriter"

	"github.com/llmesh/llmesh/node/views"
)

// parseInterleaved parses fs's flags wherever they stand among args, so
// that `set TENANT KEY -rpm 120` reads as `set -rpm 120 TENANT KEY`, and
// returns the positional arguments.
func parseInterleaved(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			return pos, nil
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

// tenantDoc reads the ledger's view of tenant through the admin API.
func tenantDoc(c *adminClient, tenant string) (views.TenantInfo, error) {
	var doc views.Tenants
	if _, err := c.do(http.MethodGet, "/v1/mesh/tenants", nil, &doc); err != nil {
		return views.TenantInfo{}, err
	}
	for _, t := range doc.Tenants {
		if t.Name == tenant {
			return t, nil
		}
	}
	return views.TenantInfo{}, fmt.Errorf("no tenant %q in the ledger", tenant)
}

// runTenantsKeys is llmesh tenants keys list|set.
func runTenantsKeys(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || (args[0] != "list" && args[0] != "set") {
		fmt.Fprintln(stderr, "llmesh tenants keys: usage: llmesh tenants keys list TENANT | llmesh tenants keys set TENANT KEY [-name N] [-models a,b] [-rpm N] [-tpm N] [-budget USD -period P] [-clear-budget]")
		return 2
	}
	if args[0] == "set" {
		return runTenantsKeysSet(args[1:], stdout, stderr)
	}
	fs := flag.NewFlagSet("tenants keys list", flag.ContinueOnError)
	fs.SetOutput(stderr)
	c := adminFlags(fs)
	pos, err := parseInterleaved(fs, args[1:])
	if err != nil || len(pos) != 1 {
		fmt.Fprintln(stderr, "llmesh tenants keys list: usage: llmesh tenants keys list [flags] TENANT")
		return 2
	}
	t, err := tenantDoc(c, pos[0])
	if err != nil {
		fmt.Fprintf(stderr, "llmesh tenants keys list: %v\n", err)
		return 1
	}
	if c.json {
		keys := t.KeySettings
		if keys == nil {
			keys = []views.KeyInfo{}
		}
		b, _ := json.Marshal(map[string]any{"tenant": t.Name, "keys": t.Keys, "limits": t.Limits, "key_settings": keys})
		_ = printJSON(stdout, b)
		return 0
	}
	printKeys(stdout, t)
	return 0
}

// printKeys prints a tenant's keys and their settings as a table.
func printKeys(w io.Writer, t views.TenantInfo) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY\tNAME\tMODELS\tRPM\tTPM\tBUDGET\tSET BY")
	shown := map[string]bool{}
	for _, k := range t.KeySettings {
		shown[k.ID] = true
		rpm, tpm, budget := "-", "-", "-"
		if k.Limits != nil && k.Limits.RPM > 0 {
			rpm = fmt.Sprint(k.Limits.RPM)
		}
		if k.Limits != nil && k.Limits.TPM > 0 {
			tpm = fmt.Sprint(k.Limits.TPM)
		}
		if k.BudgetUSD != nil {
			budget = fmt.Sprintf("$%.2f/%s", *k.BudgetUSD, k.BudgetPeriod)
		}
		models := "(all)"
		if len(k.Models) > 0 {
			models = strings.Join(k.Models, ",")
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", k.ID, orDash(k.Name), models, rpm, tpm, budget, k.Source)
	}
	for _, id := range t.Keys {
		if !shown[id] {
			fmt.Fprintf(tw, "%s\t-\t(all)\t-\t-\t-\t-\n", id)
		}
	}
	_ = tw.Flush()
	if l := t.Limits; l != nil {
		fmt.Fprintf(w, "\ntenant %s, all keys together: %s\n", t.Name, limitsText(l.RPM, l.TPM))
	}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func limitsText(rpm, tpm int64) string {
	var parts []string
	if rpm > 0 {
		parts = append(parts, fmt.Sprintf("%d requests", rpm))
	}
	if tpm > 0 {
		parts = append(parts, fmt.Sprintf("%d tokens", tpm))
	}
	if len(parts) == 0 {
		return "no limit"
	}
	return strings.Join(parts, " and ") + " a minute across the mesh"
}

// runTenantsKeysSet is llmesh tenants keys set TENANT KEY [flags]: only
// the flags given change anything; an empty -name or -models, or 0 for
// -rpm, -tpm or -budget, takes that setting away.
func runTenantsKeysSet(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("tenants keys set", flag.ContinueOnError)
	fs.SetOutput(stderr)
	c := adminFlags(fs)
	name := fs.String("name", "", "the key's `name`, unique in the tenant (\"\" takes it away)")
	models := fs.String("models", "", "the models (or groups) the key may ask for, `a,b` (\"\": every model)")
	rpm := fs.Int64("rpm", 0, "the key's requests a minute across the mesh (0: no limit)")
	tpm := fs.Int64("tpm", 0, "the key's tokens a minute across the mesh (0: no limit)")
	budget := fs.Float64("budget", 0, "the key's own budget in `USD` (0 takes it away); its tenant's still applies")
	period := fs.String("period", "month", "the budget's `period`: day, month or total")
	clearBudget := fs.Bool("clear-budget", false, "take the key's budget away")
	pos, err := parseInterleaved(fs, args)
	if err != nil || len(pos) != 2 {
		fmt.Fprintln(stderr, "llmesh tenants keys set: usage: llmesh tenants keys set TENANT KEY [-name N] [-models a,b] [-rpm N] [-tpm N] [-budget USD -period P] [-clear-budget]\n(KEY is the key's name, its id — the first 12 hex digits of its SHA-256, as llmesh tenants keys list shows — or its whole SHA-256)")
		return 2
	}
	body := map[string]any{}
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "name":
			body["name"] = *name
		case "models":
			list := []string{}
			for m := range strings.SplitSeq(*models, ",") {
				if m = strings.TrimSpace(m); m != "" {
					list = append(list, m)
				}
			}
			body["models"] = list
		case "rpm":
			body["rpm"] = *rpm
		case "tpm":
			body["tpm"] = *tpm
		case "budget":
			if *budget == 0 {
				body["clear_budget"] = true
			} else {
				body["budget"] = map[string]any{"usd": *budget, "period": *period}
			}
		case "clear-budget":
			body["clear_budget"] = *clearBudget
		}
	})
	if len(body) == 0 {
		fmt.Fprintln(stderr, "llmesh tenants keys set: nothing to change: give -name, -models, -rpm, -tpm, -budget or -clear-budget")
		return 2
	}
	tenant, key := pos[0], pos[1]
	raw, err := c.do(http.MethodPut, "/v1/mesh/tenants/"+url.PathEscape(tenant)+"/keys/"+url.PathEscape(key), body, nil)
	if err != nil {
		fmt.Fprintf(stderr, "llmesh tenants keys set: %v\n", err)
		return 1
	}
	if c.json {
		_ = printJSON(stdout, raw)
		return 0
	}
	var ans struct {
		NotServed []string `json:"not_served_here"`
	}
	_ = json.Unmarshal(raw, &ans)
	fmt.Fprintf(stdout, "key %s of tenant %s: set; every node applies it within 3 s (while it reaches a voter)\n", key, tenant)
	if len(ans.NotServed) > 0 {
		fmt.Fprintf(stdout, "note: this node serves no model or group called %s\n", strings.Join(ans.NotServed, ", "))
	}
	return 0
}

// runTenantsLimits is llmesh tenants limits TENANT [-rpm N] [-tpm N]
// [-clear]: without a flag it shows them.
func runTenantsLimits(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("tenants limits", flag.ContinueOnError)
	fs.SetOutput(stderr)
	c := adminFlags(fs)
	rpm := fs.Int64("rpm", 0, "the tenant's requests a minute across the mesh, all its keys together (0: no limit)")
	tpm := fs.Int64("tpm", 0, "the tenant's tokens a minute across the mesh (0: no limit)")
	clear := fs.Bool("clear", false, "take both limits away")
	pos, err := parseInterleaved(fs, args)
	if err != nil || len(pos) != 1 {
		fmt.Fprintln(stderr, "llmesh tenants limits: usage: llmesh tenants limits TENANT [-rpm N] [-tpm N] [-clear]")
		return 2
	}
	tenant := pos[0]
	body := map[string]any{}
	fs.Visit(func(f *flag.Flag) {
		switch f.Name {
		case "rpm":
			body["rpm"] = *rpm
		case "tpm":
			body["tpm"] = *tpm
		}
	})
	fail := func(err error) int {
		fmt.Fprintf(stderr, "llmesh tenants limits: %v\n", err)
		return 1
	}
	path := "/v1/mesh/tenants/" + url.PathEscape(tenant) + "/limits"
	var raw []byte
	switch {
	case *clear && len(body) > 0:
		return fail(errors.New("-clear takes both limits away: give it alone"))
	case *clear:
		raw, err = c.do(http.MethodDelete, path, nil, nil)
	case len(body) > 0:
		raw, err = c.do(http.MethodPut, path, body, nil)
	default:
		t, err := tenantDoc(c, tenant)
		if err != nil {
			return fail(err)
		}
		if c.json {
			b, _ := json.Marshal(map[string]any{"tenant": t.Name, "limits": t.Limits})
			_ = printJSON(stdout, b)
			return 0
		}
		var l views.LimitsInfo
		if t.Limits != nil {
			l = *t.Limits
		}
		fmt.Fprintf(stdout, "tenant %s: %s\n", t.Name, limitsText(l.RPM, l.TPM))
		return 0
	}
	if err != nil {
		return fail(err)
	}
	if c.json {
		_ = printJSON(stdout, raw)
		return 0
	}
	fmt.Fprintf(stdout, "tenant %s: limits set; every node applies them within 3 s (while it reaches a voter)\n", tenant)
	return 0
}
