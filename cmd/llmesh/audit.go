package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/llmesh/llmesh/node"
	"github.com/llmesh/llmesh/node/audit"
)

// runAudit is llmesh audit: it reads a node's audit trail (its files, on
// the node's machine or a copy) and prints the records that match, and
// with -verify checks the trail's hash chain.
func runAudit(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("audit", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("dir", "", "the audit `directory` (audit.dir; default DATA_DIR/audit of -config)")
	config := fs.String("config", "", "the node's configuration `file`, to find its audit directory")
	tenant := fs.String("tenant", "", "only this `tenant`'s records")
	request := fs.String("request", "", "only the records of this request `id`")
	provider := fs.String("provider", "", "only records of requests this `provider` served")
	since := fs.String("since", "", "only records from this `time` on: RFC 3339, or a duration back from now such as 24h")
	until := fs.String("until", "", "only records before this `time` (RFC 3339 or a duration back from now)")
	verify := fs.Bool("verify", false, "check the hash chain: exit 1 if a line was removed or changed")
	asJSON := fs.Bool("json", false, "print the records as JSON lines")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	fail := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "llmesh audit: "+format+"\n", a...)
		return 1
	}
	if (*dir == "") == (*config == "") {
		fmt.Fprintln(stderr, "llmesh audit: give one of -dir DIR or -config FILE")
		return 2
	}
	if *config != "" {
		cfg, err := node.LoadConfig(*config)
		if err != nil {
			return fail("%v", err)
		}
		if *dir = cfg.Audit.Dir; *dir == "" {
			*dir = filepath.Join(cfg.Node.DataDir, "audit")
		}
	}
	now := time.Now()
	from, err := parseWhen(*since, now)
	if err != nil {
		return fail("-since: %v", err)
	}
	to, err := parseWhen(*until, now)
	if err != nil {
		return fail("-until: %v", err)
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	if !*asJSON && !*verify {
		fmt.Fprintln(tw, "TIME\tREQUEST\tTENANT\tRESIDENCY\tNODES\tPROVIDER\tJURISDICTIONS\tOUTCOME")
	}
	matched := 0
	enc := json.NewEncoder(stdout)
	breaks, err := audit.Scan(*dir, func(r audit.Record) error {
		if (*tenant != "" && r.Tenant != *tenant) || (*request != "" && r.RequestID != *request) ||
			(*provider != "" && r.Provider != *provider) || (!from.IsZero() && r.Time.Before(from)) || (!to.IsZero() && !r.Time.Before(to)) {
			return nil
		}
		matched++
		switch {
		case *verify:
		case *asJSON:
			return enc.Encode(r)
		default:
			where, juris := r.Provider, r.ProviderJurisdictions
			if where == "" {
				where, juris = "-", "-"
			}
			out := r.Outcome
			if r.Error != "" {
				out += " (" + r.Error + ")"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Time.Format(time.RFC3339Nano), r.RequestID, r.Tenant, r.Residency,
				strings.Join(r.Nodes, ">"), where, juris, out)
		}
		return nil
	})
	if err != nil {
		return fail("%v", err)
	}
	_ = tw.Flush()
	if *verify {
		if len(breaks) > 0 {
			for _, b := range breaks {
				fmt.Fprintln(stderr, b.Error())
			}
			return fail("%d break(s) in the chain of %s", len(breaks), *dir)
		}
		fmt.Fprintf(stdout, "%d records, chain intact\n", matched)
	}
	return 0
}

// parseWhen reads an RFC 3339 time or a duration back from now; "" is
// the zero time (no bound).
func parseWhen(s string, now time.Time) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	if d, err := time.ParseDuration(s); err == nil {
		return now.Add(-d), nil
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return time.Time{}, errors.New("want RFC 3339 (2026-11-29T10:00:00Z) or a duration such as 24h")
	}
	return t, nil
}
