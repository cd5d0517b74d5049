// Command llmesh is the one llmesh binary: the agent that runs a node, the
// provider emulator, the operator verbs, the demo, the simulator and the
// benchmark harness. Signals are handled here only.
package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"time"
)

const usage = `llmesh — a peer-to-peer routing mesh for LLM API traffic

Usage:
  llmesh agent -dev                 one node with built-in emulated providers
  llmesh agent -config FILE         a node configured by FILE
  llmesh demo                       a three-region mesh in one process, a little traffic, where it went and why
  llmesh emulate -listen ADDR ...   a standalone OpenAI-compatible provider emulator
  llmesh bench [-rate N] [-stream F] the node's cost against the emulator, a bare Go proxy and nginx
  llmesh sim -scenario FILE         a mesh in virtual time under four policies: cost, latency, residency, budgets
  llmesh members                    the mesh's nodes: region, address, state, estimated RTT
  llmesh providers                  the providers as the node sees them, with every node's reports
  llmesh join ADDR...               make the node join the mesh through gossip ADDRs
  llmesh budgets [-consistency C]   limit, settled, reserved and remaining per tenant
  llmesh budgets set TENANT USD     change a tenant's budget (-period day|month|total)
  llmesh budgets forfeit NODE       write off the escrow of a node that will not return
  llmesh spend [-by D] [-since T]   spend by tenant, key, tag, model or provider, from the ledger (-tenant NAME)
  llmesh tenants [list]             tenants, their residency, key ids (never keys) and revoked key ids
  llmesh tenants add TENANT         a new tenant (-residency J, -strict), or a new key for one: printed once
  llmesh tenants rotate TENANT      a new key, and the old ones revoked (-keep keeps them)
  llmesh tenants revoke TENANT ID.. revoke keys (-all: every key); every node refuses them within 3 s
  llmesh tenants keys list TENANT   a tenant's keys: name, model allow-list, limits, budget
  llmesh tenants keys set TENANT KEY a key's settings (-name, -models a,b, -rpm, -tpm, -budget USD -period P)
  llmesh tenants limits TENANT      a tenant's mesh-wide limits (-rpm N, -tpm N, -clear)
  llmesh audit -dir DIR             where each request of a tenant with a residency went (-tenant, -request, -since, -verify)
  llmesh raft peers                 the Raft configuration and its leader
  llmesh status                     this node: phase, role, leader, members, healthy providers, leases held
  llmesh ready                      exit 0 when the node is ready for traffic (/readyz): a container health check
  llmesh drain [-wait]              the node hands traffic to peers, finishes what is in flight, leaves and exits
  llmesh leave [-wait]              the same graceful exit, for a node leaving the mesh
  llmesh keygen                     a new gossip encryption key
  llmesh tls init NODE...           a development CA and certificates for mutual TLS between nodes
  llmesh version

Operator verbs take -addr http://127.0.0.1:8080, -token (or $LLMESH_ADMIN_TOKEN) and -json.

Run "llmesh COMMAND -h" for a command's flags.
`

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run dispatches a command line and returns the exit code.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "agent":
		return runAgent(args[1:], stdout, stderr)
	case "emulate":
		return runEmulate(args[1:], stdout, stderr)
	case "demo":
		return runDemo(args[1:], stdout, stderr)
	case "bench":
		return runBench(args[1:], stdout, stderr)
	case "sim":
		return runSim(args[1:], stdout, stderr)
	case "members":
		return runMembers(args[1:], stdout, stderr)
	case "providers":
		return runProviders(args[1:], stdout, stderr)
	case "join":
		return runJoin(args[1:], stdout, stderr)
	case "budgets":
		return runBudgets(args[1:], stdout, stderr)
	case "spend":
		return runSpend(args[1:], stdout, stderr)
	case "raft":
		return runRaft(args[1:], stdout, stderr)
	case "status":
		return runStatus(args[1:], stdout, stderr)
	case "drain", "leave":
		return runDrain(args[0], args[1:], stdout, stderr)
	case "ready":
		return verb("ready", args[1:], stdout, stderr, 0, func(c *adminClient, _ []string) error {
			c.http.Timeout = 5 * time.Second
			_, err := c.do(http.MethodGet, "/readyz", nil, nil)
			return err
		})
	case "keygen":
		return runKeygen(args[1:], stdout, stderr)
	case "tenants":
		return runTenants(args[1:], stdout, stderr)
	case "audit":
		return runAudit(args[1:], stdout, stderr)
	case "tls":
		return runTLS(args[1:], stdout, stderr)
	case "version", "-version", "--version":
		fmt.Fprintln(stdout, "llmesh", version)
		return 0
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	}
	fmt.Fprintf(stderr, "llmesh: unknown command %q\n\n%s", args[0], usage)
	return 2
}
