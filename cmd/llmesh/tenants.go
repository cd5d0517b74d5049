package main

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"text/tabwriter"

	"github.com/llmesh/llmesh/node/views"
)

// tenantKeyPrefix marks llmesh tenant keys, so that they are recognised
// where they leak (secret scanners, logs under review).
const tenantKeyPrefix = "sk-llmesh-"

// newTenantKey returns a new key: the prefix and 256 random bits, and
// its SHA-256 in hex, which is all the mesh keeps.
func newTenantKey() (key, hash string, err error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", "", err
	}
	key = tenantKeyPrefix + base64.RawURLEncoding.EncodeToString(b[:])
	sum := sha256.Sum256([]byte(key))
	return key, hex.EncodeToString(sum[:]), nil
}

// runTenants is llmesh tenants list|add|rotate|revoke. Keys are made here,
// on the operator's machine: only their hashes travel to the node.
func runTenants(args []string, stdout, stderr io.Writer) int {
	sub := "list"
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		sub, args = args[0], args[1:]
	}
	switch sub {
	case "list":
		return verb("tenants list", args, stdout, stderr, 0, func(c *adminClient, _ []string) error {
			var doc views.Tenants
			raw, err := c.do(http.MethodGet, "/v1/mesh/tenants", nil, &doc)
			if err != nil || c.json {
				return orJSON(stdout, raw, err)
			}
			tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "TENANT\tRESIDENCY\tKEYS\tREVOKED\tBUDGET")
			for _, t := range doc.Tenants {
				res := t.Residency
				if res == "" {
					res = "-"
				} else if t.StrictTransit {
					res += " (strict)"
				}
				budget := "-"
				if t.BudgetUSD != nil {
					budget = fmt.Sprintf("$%.2f/%s", *t.BudgetUSD, t.BudgetPeriod)
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", t.Name, res, orNone(t.Keys), orNone(t.Revoked), budget)
			}
			return tw.Flush()
		})
	case "add", "rotate":
		return runTenantsAdd(sub, args, stdout, stderr)
	case "revoke":
		return runTenantsRevoke(args, stdout, stderr)
	case "keys":
		return runTenantsKeys(args, stdout, stderr)
	case "limits":
		return runTenantsLimits(args, stdout, stderr)
	}
	fmt.Fprintf(stderr, "llmesh tenants: unknown subcommand %q: list, add, rotate, revoke, keys or limits\n", sub)
	return 2
}

// runTenantsAdd is llmesh tenants add (a tenant, or a key for one) and
// rotate (a new key, then the old ones revoked unless -keep).
func runTenantsAdd(sub string, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("tenants "+sub, flag.ContinueOnError)
	fs.SetOutput(stderr)
	c := adminFlags(fs)
	residency, strict, keep := new(string), new(bool), new(bool)
	if sub == "add" {
		residency = fs.String("residency", "", "the new tenant's `jurisdiction`: its data stays there")
		strict = fs.Bool("strict", false, "the new tenant's requests pass only through nodes of its jurisdiction")
	} else {
		keep = fs.Bool("keep", false, "keep the old keys valid (revoke them later with llmesh tenants revoke)")
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() != 1 {
		fmt.Fprintf(stderr, "llmesh tenants %s: usage: llmesh tenants %s [flags] TENANT\n", sub, sub)
		return 2
	}
	tenant := fs.Arg(0)
	fail := func(err error) int {
		fmt.Fprintf(stderr, "llmesh tenants %s: %v\n", sub, err)
		return 1
	}
	var old []string
	if sub == "rotate" {
		var doc views.Tenants
		if _, err := c.do(http.MethodGet, "/v1/mesh/tenants", nil, &doc); err != nil {
			return fail(err)
		}
		found := false
		for _, t := range doc.Tenants {
			if t.Name == tenant {
				old, found = t.Keys, true
			}
		}
		if !found {
			return fail(fmt.Errorf("no tenant %q in the ledger", tenant))
		}
	}
	key, hash, err := newTenantKey()
	if err != nil {
		return fail(err)
	}
	path := "/v1/mesh/tenants/" + url.PathEscape(tenant)
	body := map[string]any{"key_sha256": hash, "create": sub == "add", "residency": *residency, "strict_transit": *strict}
	if _, err := c.do(http.MethodPost, path+"/keys", body, nil); err != nil {
		return fail(err)
	}
	if sub == "rotate" && !*keep && len(old) > 0 {
		if _, err := c.do(http.MethodPost, path+"/revoke", map[string]any{"keys": old}, nil); err != nil {
			return fail(fmt.Errorf("the new key %s works, but the old ones were not revoked: %w", hash[:12], err))
		}
	}
	if c.json {
		revoked := []string{}
		if sub == "rotate" && !*keep {
			revoked = append(revoked, old...)
		}
		b, _ := json.Marshal(map[string]any{"tenant": tenant, "key": key, "key_id": hash[:12], "revoked": revoked})
		if err := printJSON(stdout, b); err != nil {
			return fail(err)
		}
		return 0
	}
	fmt.Fprintf(stdout, "tenant %s, key %s:\n\n  %s\n\nThe mesh keeps only its SHA-256: this is the only time the key is shown.\n", tenant, hash[:12], key)
	if sub == "rotate" && len(old) > 0 {
		if *keep {
			fmt.Fprintf(stdout, "The old keys (%s) still work: llmesh tenants revoke %s %s\n", strings.Join(old, " "), tenant, strings.Join(old, " "))
		} else {
			fmt.Fprintf(stdout, "Revoked: %s. Every node refuses them within 3 s.\n", strings.Join(old, ", "))
		}
	}
	return 0
}

// runTenantsRevoke is llmesh tenants revoke TENANT (KEY_ID... | -all).
func runTenantsRevoke(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("tenants revoke", flag.ContinueOnError)
	fs.SetOutput(stderr)
	c := adminFlags(fs)
	all := fs.Bool("all", false, "revoke every key of the tenant")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() < 1 || (fs.NArg() == 1) != *all {
		fmt.Fprintln(stderr, "llmesh tenants revoke: usage: llmesh tenants revoke TENANT KEY_ID... | llmesh tenants revoke -all TENANT\n(a key id is the first 12 hex digits of its SHA-256, as llmesh tenants list shows; a key of a configuration file can be named by its whole key_sha256)")
		return 2
	}
	tenant := fs.Arg(0)
	raw, err := c.do(http.MethodPost, "/v1/mesh/tenants/"+url.PathEscape(tenant)+"/revoke", map[string]any{"keys": fs.Args()[1:], "all": *all}, nil)
	if err != nil {
		fmt.Fprintf(stderr, "llmesh tenants revoke: %v\n", err)
		return 1
	}
	if c.json {
		_ = printJSON(stdout, raw)
		return 0
	}
	fmt.Fprintf(stdout, "revoked; every node refuses the keys within 3 s (while it reaches a voter)\n")
	return 0
}
