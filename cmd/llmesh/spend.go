package main

import (
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"text/tabwriter"

	"github.com/llmesh/llmesh/node/views"
)

// runSpend prints what was spent since a time, by tenant, key, tag set,
// model or provider, from the ledger (GET /v1/mesh/spend).
func runSpend(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("spend", flag.ContinueOnError)
	fs.SetOutput(stderr)
	c := adminFlags(fs)
	by := fs.String("by", "tenant", "what to total by: tenant, key, tag, model or provider")
	since := fs.String("since", "24h", "from when: a duration back from now (24h, 7d) or an RFC 3339 time")
	tenant := fs.String("tenant", "", "only this tenant's spend")
	consistency := fs.String("consistency", "linearizable", "linearizable (through the leader) or stale (this node's replica)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintln(stderr, "llmesh spend: usage: llmesh spend [-by tenant|key|tag|model|provider] [-since DUR] [-tenant NAME] [-json]")
		return 2
	}
	q := url.Values{"by": {*by}, "since": {*since}, "consistency": {*consistency}}
	if *tenant != "" {
		q.Set("tenant", *tenant)
	}
	var doc views.Spend
	raw, err := c.do(http.MethodGet, "/v1/mesh/spend?"+q.Encode(), nil, &doc)
	if err == nil && !c.json {
		err = printSpend(stdout, &doc)
	} else {
		err = orJSON(stdout, raw, err)
	}
	if err != nil {
		fmt.Fprintf(stderr, "llmesh spend: %v\n", err)
		return 1
	}
	return 0
}

// printSpend prints a spend view as a table: a row per tenant and name,
// most first, then the total they add up to.
func printSpend(w io.Writer, doc *views.Spend) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	name := map[string]string{"key": "KEY", "tag": "TAGS", "model": "MODEL", "provider": "PROVIDER"}[doc.By]
	cols := func(tenant, n, usd, requests, share string) {
		if name == "" {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", tenant, usd, requests, share)
		} else {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", tenant, n, usd, requests, share)
		}
	}
	cols("TENANT", name, "USD", "REQUESTS", "SHARE")
	for _, r := range doc.Rows {
		n := r.Name
		if r.Label != "" {
			n = r.Label + " (" + r.Name + ")"
		}
		cols(r.Tenant, n, dollars(r.Nanos), fmt.Sprint(r.Requests), fmt.Sprintf("%.1f%%", 100*r.Share))
	}
	cols("TOTAL", "", dollars(doc.TotalNanos), fmt.Sprint(doc.Requests), "")
	if err := tw.Flush(); err != nil {
		return err
	}
	step := map[string]string{"hour": "by the hour", "day": "by the day"}[doc.Step]
	fmt.Fprintf(w, "(since %s, kept %s; %s read)\n", doc.From.Format("2006-01-02 15:04 MST"), step, doc.Consistency)
	if doc.By == "tag" {
		fmt.Fprintln(w, "(a request's cost counts once, under its set of tags: the rows add up to the total)")
	}
	return nil
}

// dollars formats nano-dollars exactly.
func dollars(nanos int64) string { return fmt.Sprintf("$%d.%09d", nanos/1e9, nanos%1e9) }
