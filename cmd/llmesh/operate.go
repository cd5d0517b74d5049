package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/llmesh/llmesh/node/views"
)

// runStatus prints a node's view of itself and the mesh.
func runStatus(args []string, stdout, stderr io.Writer) int {
	return verb("status", args, stdout, stderr, 0, func(c *adminClient, _ []string) error {
		var st views.Status
		raw, err := c.do(http.MethodGet, "/v1/mesh/status", nil, &st)
		if err != nil || c.json {
			return orJSON(stdout, raw, err)
		}
		role := st.Role
		if st.Raft != "" {
			role += " (" + strings.ToLower(st.Raft) + ")"
		}
		leader := st.Leader
		if leader == "" {
			leader = "none known"
		}
		var members []string
		for _, s := range []string{"alive", "draining", "suspect", "failed", "left"} {
			if st.Members[s] > 0 {
				members = append(members, fmt.Sprintf("%d %s", st.Members[s], s))
			}
		}
		ready := "ready"
		if !st.Ready {
			ready = "not ready"
		}
		tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintf(tw, "node\t%s (%s, %s)\n", st.Node, st.Region, st.Jurisdiction)
		fmt.Fprintf(tw, "state\t%s, %s, %d in flight\n", st.Phase, ready, st.InFlight)
		fmt.Fprintf(tw, "role\t%s\n", role)
		fmt.Fprintf(tw, "leader\t%s\n", leader)
		if st.LedgerVersion != nil {
			fmt.Fprintf(tw, "ledger version\t%d (agreed by the voters)\n", *st.LedgerVersion)
		}
		fmt.Fprintf(tw, "members\t%s\n", strings.Join(members, ", "))
		fmt.Fprintf(tw, "healthy providers\t%s\n", orNone(st.Providers))
		if len(st.Unhealthy) > 0 {
			fmt.Fprintf(tw, "unhealthy providers\t%s\n", strings.Join(st.Unhealthy, ", "))
		}
		a := st.Admission
		fmt.Fprintf(tw, "admission\t%d waiting (at most %d, %s each); %d waited %s in all\n", a.Waiting, a.QueueLimit,
			seconds(a.MaxWaitSec), a.Waited, seconds(a.WaitedSec))
		if st.Build != "" {
			fmt.Fprintf(tw, "build\t%s\n", st.Build)
		}
		fmt.Fprintf(tw, "uptime\t%s\n", (time.Duration(st.UptimeSec) * time.Second).String())
		tw.Flush()
		if len(st.Leases) > 0 {
			fmt.Fprintln(stdout, "\nbudget leases held:")
			tw = tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "  TENANT\tPERIOD\tGRANTED\tSPENT\tIN FLIGHT\tEXPIRES IN")
			for _, l := range st.Leases {
				fmt.Fprintf(tw, "  %s\t%s\t$%.4f\t$%.4f\t$%.4f\t%.0fs\n", l.Tenant, l.Period, l.GrantedUSD, l.SpentUSD, l.InflightUSD, l.ExpiresSec)
			}
			tw.Flush()
		}
		if len(st.RateShares) > 0 {
			fmt.Fprintln(stdout, "\nrate shares held (per minute):")
			tw = tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "  PROVIDER\tREQUESTS\tTOKENS\tSPARE")
			for _, r := range st.RateShares {
				spare := "-"
				if r.Spare >= 0 {
					spare = fmt.Sprint(r.Spare)
				}
				fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", r.Provider, perMinute(r.RPM), perMinute(r.TPM), spare)
			}
			tw.Flush()
		}
		return nil
	})
}

func orNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}

// seconds prints a duration given in seconds, to the millisecond.
func seconds(v float64) string {
	return (time.Duration(v * float64(time.Second))).Round(time.Millisecond).String()
}

func perMinute(v float64) string {
	if v < 0 {
		return "unlimited"
	}
	return fmt.Sprintf("%.0f", v)
}

// runDrain has a node drain and exit; with -wait it follows the drain
// until the node has stopped and its peers no longer list it.
func runDrain(name string, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	c := adminFlags(fs)
	wait := fs.Bool("wait", false, "follow the drain until the node has stopped and its peers no longer list it")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "llmesh %s: unexpected argument %q\n", name, fs.Arg(0))
		return 2
	}
	var ack struct {
		Node     string  `json:"node"`
		Grace    float64 `json:"grace_s"`
		Timeout  float64 `json:"timeout_s"`
		Phase    string  `json:"phase"`
		Finished bool    `json:"finished,omitempty"`
	}
	var peers []string
	if *wait {
		peers = peerAddrs(c)
	}
	raw, err := c.do(http.MethodPost, "/v1/mesh/"+name, nil, &ack)
	if err != nil {
		fmt.Fprintf(stderr, "llmesh %s: %v\n", name, err)
		return 1
	}
	if !*wait {
		if c.json {
			_ = printJSON(stdout, raw)
			return 0
		}
		fmt.Fprintf(stdout, "%s is draining: it hands new requests to peers for %.0fs, lets those in flight finish (at most %.0fs in all), settles its leases, leaves and exits\n",
			ack.Node, ack.Grace, ack.Timeout)
		return 0
	}
	deadline := time.Now().Add(time.Duration(ack.Timeout*float64(time.Second)) + 30*time.Second)
	if err := awaitStopped(c, stdout, ack.Node, deadline); err != nil {
		fmt.Fprintf(stderr, "llmesh %s: %v\n", name, err)
		return 1
	}
	if err := awaitLeft(c, peers, stdout, ack.Node, deadline); err != nil {
		fmt.Fprintf(stderr, "llmesh %s: %v\n", name, err)
		return 1
	}
	return 0
}

// peerAddrs are the admin URLs of the node's alive peers, which can tell
// when it has left: read before it drains, as it stops answering then.
func peerAddrs(c *adminClient) []string {
	var doc views.Members
	if _, err := c.do(http.MethodGet, "/v1/mesh/members", nil, &doc); err != nil {
		return nil
	}
	u, err := url.Parse(c.addr)
	if err != nil {
		return nil
	}
	var out []string
	for _, m := range doc.Members {
		host, port, err := net.SplitHostPort(m.HTTP)
		if m.Self || m.State != "alive" || err != nil {
			continue
		}
		if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
			host = u.Hostname() // listening on every address: reached as the node was
		}
		out = append(out, u.Scheme+"://"+net.JoinHostPort(host, port))
	}
	return out
}

// awaitLeft asks the node's peers, once it stopped taking connections,
// until one says it has left gossip and Raft's configuration, so that
// what an operator reads next no longer lists it. A node without peers
// has nobody to leave; peers that never answer (another admin token, or
// a loopback-only admin API on another host) are warned of, not failed
// on: the drain itself succeeded.
func awaitLeft(c *adminClient, peers []string, stdout io.Writer, name string, deadline time.Time) error {
	if len(peers) == 0 {
		return nil
	}
	answered := false
	for i := 0; time.Now().Before(deadline); i++ {
		p := *c
		p.addr = peers[i%len(peers)]
		gone, ok := left(&p, name)
		answered = answered || ok
		if gone {
			fmt.Fprintf(stdout, "%s has left the mesh and Raft (as %s sees it)\n", name, p.addr)
			return nil
		}
		if !answered && i >= 3*len(peers) {
			fmt.Fprintf(stdout, "%s stopped; none of its peers (%s) answered to confirm it left: check them with -addr\n", name, strings.Join(peers, ", "))
			return nil
		}
		time.Sleep(200 * time.Millisecond) // a poll of another process's state, not a wait in this one
	}
	return fmt.Errorf("%s stopped, but its peers (%s) still list it", name, strings.Join(peers, ", "))
}

// left reports whether the peer c asks no longer lists name as a live
// member or in Raft's configuration, and whether the peer answered.
func left(c *adminClient, name string) (gone, answered bool) {
	var doc views.Members
	if _, err := c.do(http.MethodGet, "/v1/mesh/members", nil, &doc); err != nil {
		return false, false
	}
	for _, m := range doc.Members {
		if m.Name == name && m.State != "left" && m.State != "failed" {
			return false, true
		}
	}
	var peers struct {
		Peers []struct {
			ID string `json:"id"`
		} `json:"peers"`
	}
	if _, err := c.do(http.MethodGet, "/v1/mesh/raft/peers", nil, &peers); err != nil {
		return false, true // every peer that gossips has a part in the ledger: ask again
	}
	for _, p := range peers.Peers {
		if p.ID == name {
			return false, true
		}
	}
	return true, true
}

// awaitStopped follows a draining node's phases until it no longer
// answers (its grace is over and it closed its listener), printing each
// phase once.
func awaitStopped(c *adminClient, stdout io.Writer, name string, deadline time.Time) error {
	c.http.Timeout = 2 * time.Second
	last := ""
	for ; time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		var st views.Status
		_, err := c.do(http.MethodGet, "/v1/mesh/status", nil, &st)
		if err != nil {
			// The node closed its listener: nothing more to follow.
			if ue := (*url.Error)(nil); errors.As(err, &ue) {
				fmt.Fprintf(stdout, "%s stopped taking connections: it finishes what is in flight, settles its leases, leaves and exits\n", name)
				return nil
			}
			return err
		}
		if st.Phase != last {
			fmt.Fprintf(stdout, "%s: %s (%d in flight)\n", name, st.Phase, st.InFlight)
			last = st.Phase
		}
	}
	return fmt.Errorf("%s still answers at %s", name, deadline.Format(time.TimeOnly))
}
