package main

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/llmesh/llmesh/node/views"
)

// adminClient talks to a node's admin API for the operator verbs.
type adminClient struct {
	addr, token string
	json        bool
	http        *http.Client
}

// adminFlags registers the flags every operator verb takes.
func adminFlags(fs *flag.FlagSet) *adminClient {
	c := &adminClient{http: &http.Client{Timeout: 30 * time.Second}}
	fs.StringVar(&c.addr, "addr", "http://127.0.0.1:8080", "the node's HTTP `address`")
	fs.StringVar(&c.token, "token", os.Getenv("LLMESH_ADMIN_TOKEN"), "admin `token` (default $LLMESH_ADMIN_TOKEN)")
	fs.BoolVar(&c.json, "json", false, "print JSON instead of a table")
	return c
}

// do sends a request and decodes a 2xx JSON answer into v; the raw
// answer is returned for -json.
func (c *adminClient) do(method, path string, body any, v any) ([]byte, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, strings.TrimSuffix(c.addr, "/")+path, rd)
	if err != nil {
		return nil, err
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, c.unreachable(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode/100 != 2 {
		var e struct {
			Error struct{ Message string } `json:"error"`
		}
		if json.Unmarshal(raw, &e) == nil && e.Error.Message != "" {
			return nil, fmt.Errorf("%s: %s", resp.Status, e.Error.Message)
		}
		return nil, fmt.Errorf("%s", resp.Status)
	}
	if v != nil {
		if err := json.Unmarshal(raw, v); err != nil {
			return nil, fmt.Errorf("unexpected answer: %w", err)
		}
	}
	return raw, nil
}

// unreachable explains a failed connection: the address tried and how
// to point the verb elsewhere or start a node there. The url.Error stays
// in the chain (awaitStopped looks for it).
func (c *adminClient) unreachable(err error) error {
	var ue *url.Error
	if !errors.As(err, &ue) {
		return err
	}
	return fmt.Errorf("%w\nno node answers at %s: pass -addr with the node's HTTP address, or start one there with `llmesh agent -dev`", err, c.addr)
}

// verb runs one operator verb with its flags parsed, printing errors.
func verb(name string, args []string, stdout, stderr io.Writer, minArgs int, run func(c *adminClient, args []string) error) int {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	c := adminFlags(fs)
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() < minArgs {
		fmt.Fprintf(stderr, "llmesh %s: needs at least %d argument(s)\n", name, minArgs)
		return 2
	}
	if err := run(c, fs.Args()); err != nil {
		fmt.Fprintf(stderr, "llmesh %s: %v\n", name, err)
		return 1
	}
	return 0
}

func printJSON(w io.Writer, raw []byte) error {
	var buf bytes.Buffer
	if err := json.Indent(&buf, raw, "", "  "); err != nil {
		return err
	}
	buf.WriteByte('\n')
	_, err := w.Write(buf.Bytes())
	return err
}

func runMembers(args []string, stdout, stderr io.Writer) int {
	return verb("members", args, stdout, stderr, 0, func(c *adminClient, _ []string) error {
		var doc views.Members
		raw, err := c.do(http.MethodGet, "/v1/mesh/members", nil, &doc)
		if err != nil || c.json {
			return orJSON(stdout, raw, err)
		}
		tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "NAME\tREGION\tADDRESS\tSTATE\tRTT\tVOTER")
		for _, m := range doc.Members {
			rtt := "-"
			switch {
			case m.Self:
				rtt = "(self)"
			case m.RTTMillis >= 0:
				rtt = fmt.Sprintf("%.2fms", m.RTTMillis)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%v\n", m.Name, m.Region, m.Address, m.State, rtt, m.Voter)
		}
		return tw.Flush()
	})
}

func runProviders(args []string, stdout, stderr io.Writer) int {
	return verb("providers", args, stdout, stderr, 0, func(c *adminClient, _ []string) error {
		var doc views.Providers
		raw, err := c.do(http.MethodGet, "/v1/mesh/providers", nil, &doc)
		if err != nil || c.json {
			return orJSON(stdout, raw, err)
		}
		tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintf(tw, "PROVIDER\tREGION\tREACH\tJURISDICTIONS\tSTATE\tTTFT\tLATENCY\tERRORS\tOBSERVERS\n")
		for _, p := range doc.Providers {
			state := "healthy"
			switch {
			case p.View.Ejected:
				state = "ejected"
			case p.View.CoolingSeconds > 0:
				state = fmt.Sprintf("cooling %.0fs", p.View.CoolingSeconds)
			case p.View.Degraded:
				state = "failing elsewhere"
			case p.View.TTFTMillis == 0 && p.View.LatencyMillis == 0:
				state = "unknown"
			}
			var obs []string
			for _, o := range p.Observers {
				obs = append(obs, o.Observer)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%.0f%%\t%s\n", p.Name, p.Region, p.Reach, p.Jurisdictions, state,
				millis(p.View.TTFTMillis), millis(p.View.LatencyMillis), 100*p.View.ErrorRate, strings.Join(obs, ","))
		}
		fmt.Fprintf(tw, "(as seen by %s)\n", doc.Node)
		return tw.Flush()
	})
}

func millis(v float64) string {
	if v == 0 {
		return "-"
	}
	return fmt.Sprintf("%.0fms", v)
}

func runJoin(args []string, stdout, stderr io.Writer) int {
	return verb("join", args, stdout, stderr, 1, func(c *adminClient, addrs []string) error {
		var doc struct{ Joined, Members int }
		raw, err := c.do(http.MethodPost, "/v1/mesh/join", map[string]any{"addrs": addrs}, &doc)
		if err != nil || c.json {
			return orJSON(stdout, raw, err)
		}
		fmt.Fprintf(stdout, "contacted %d of %d; the mesh now has %d members\n", doc.Joined, len(addrs), doc.Members)
		return nil
	})
}

func orJSON(w io.Writer, raw []byte, err error) error {
	if err != nil {
		return err
	}
	return printJSON(w, raw)
}

// runKeygen prints a new gossip key: 32 random bytes, base64.
func runKeygen(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		fmt.Fprintln(stderr, "llmesh keygen: takes no arguments")
		return 2
	}
	var k [32]byte
	if _, err := rand.Read(k[:]); err != nil {
		fmt.Fprintf(stderr, "llmesh keygen: %v\n", err)
		return 1
	}
	fmt.Fprintln(stdout, base64.StdEncoding.EncodeToString(k[:]))
	return 0
}

func runBudgets(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "set" {
		return runBudgetsSet(args[1:], stdout, stderr)
	}
	if len(args) > 0 && args[0] == "forfeit" {
		return verb("budgets forfeit", args[1:], stdout, stderr, 1, func(c *adminClient, a []string) error {
			raw, err := c.do(http.MethodPost, "/v1/mesh/budgets/forfeit", map[string]any{"node": a[0]}, nil)
			if err != nil || c.json {
				return orJSON(stdout, raw, err)
			}
			fmt.Fprintf(stdout, "the escrow %s held is written off as spent\n", a[0])
			return nil
		})
	}
	fs := flag.NewFlagSet("budgets", flag.ContinueOnError)
	fs.SetOutput(stderr)
	c := adminFlags(fs)
	consistency := fs.String("consistency", "linearizable", "linearizable (through the leader) or stale (this node's replica)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	var doc views.Budgets
	raw, err := c.do(http.MethodGet, "/v1/mesh/budgets?consistency="+*consistency, nil, &doc)
	if err != nil || c.json {
		if err := orJSON(stdout, raw, err); err != nil {
			fmt.Fprintf(stderr, "llmesh budgets: %v\n", err)
			return 1
		}
		return 0
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TENANT\tPERIOD\tLIMIT\tSETTLED\tRESERVED\tREMAINING\tFORFEITED\tOVERSPENT\tLEASES")
	for _, b := range doc.Budgets {
		leases := fmt.Sprint(b.Leases)
		if b.ExpiredLeases > 0 {
			leases += fmt.Sprintf(" (%d expired)", b.ExpiredLeases)
		}
		fmt.Fprintf(tw, "%s\t%s\t$%.6f\t$%.6f\t$%.6f\t$%.6f\t$%.6f\t$%.6f\t%s\n", b.Tenant, b.Period, b.LimitUSD, b.SettledUSD, b.ReservedUSD,
			b.RemainingUSD, b.ForfeitedUSD, b.OverspendUSD, leases)
	}
	fmt.Fprintf(tw, "(%s read)\n", doc.Consistency)
	if err := tw.Flush(); err != nil {
		return 1
	}
	return 0
}

func runBudgetsSet(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("budgets set", flag.ContinueOnError)
	fs.SetOutput(stderr)
	c := adminFlags(fs)
	period := fs.String("period", "month", "budget period: day, month or total")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() != 2 {
		fmt.Fprintln(stderr, "llmesh budgets set: usage: llmesh budgets set [-period P] TENANT USD")
		return 2
	}
	var usd float64
	if _, err := fmt.Sscan(fs.Arg(1), &usd); err != nil || usd < 0 {
		fmt.Fprintf(stderr, "llmesh budgets set: %q is not an amount of dollars\n", fs.Arg(1))
		return 2
	}
	raw, err := c.do(http.MethodPut, "/v1/mesh/budgets/"+fs.Arg(0), map[string]any{"usd": usd, "period": *period}, nil)
	if err != nil {
		fmt.Fprintf(stderr, "llmesh budgets set: %v\n", err)
		return 1
	}
	if c.json {
		_ = printJSON(stdout, raw)
		return 0
	}
	fmt.Fprintf(stdout, "%s: $%.4f per %s\n", fs.Arg(0), usd, *period)
	return 0
}

func runRaft(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] != "peers" {
		fmt.Fprintln(stderr, "llmesh raft: usage: llmesh raft peers [-json]")
		return 2
	}
	return verb("raft peers", args[1:], stdout, stderr, 0, func(c *adminClient, _ []string) error {
		var doc struct {
			Peers []struct {
				ID, Address   string
				Voter, Leader bool
				Version       int `json:"ledger_version"`
			}
			Version *int `json:"ledger_version"`
		}
		raw, err := c.do(http.MethodGet, "/v1/mesh/raft/peers", nil, &doc)
		if err != nil || c.json {
			return orJSON(stdout, raw, err)
		}
		tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "NODE\tADDRESS\tSUFFRAGE\tLEADER\tLEDGER VERSION")
		for _, p := range doc.Peers {
			suffrage := "nonvoter"
			if p.Voter {
				suffrage = "voter"
			}
			leader := ""
			if p.Leader {
				leader = "leader"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\n", p.ID, p.Address, suffrage, leader, p.Version)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		if doc.Version != nil {
			fmt.Fprintf(stdout, "agreed ledger version: %d\n", *doc.Version)
		}
		return nil
	})
}
