package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"text/tabwriter"

	"github.com/llmesh/llmesh/node"
	"github.com/llmesh/llmesh/sim/harness"
)

// runDemo runs `llmesh demo`: three regions in one process, a little
// traffic, a table of where it went and why; then it serves until
// interrupted.
func runDemo(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	httpAddr := fs.String("http", node.DefaultHTTPAddr, "HTTP `address` of the first node (eu-1); the others take the next two ports (port 0: any)")
	logLevel := fs.String("log-level", "warn", "log level of the nodes: debug, info, warn or error")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	logger, err := newLogger(stderr, "text", *logLevel)
	if err != nil {
		fmt.Fprintf(stderr, "llmesh demo: %v\n", err)
		return 2
	}
	// Three nodes electing a leader on start is expected: not shown
	// unless asked.
	logger = slog.New(harness.QuietLogs(logger.Handler()))
	ctx, stop := untilSignal(stderr)
	defer stop()
	fmt.Fprintln(stdout, "llmesh demo: starting three nodes (eu-1 in eu-west, us-1 in us-east, ap-1 in ap-south) and four emulated providers (gpu-eu with three replicas)...")
	d, err := harness.StartDemo(ctx, *httpAddr, logger)
	if err != nil {
		fmt.Fprintf(stderr, "llmesh demo: %v\n", err)
		return 1
	}
	printDemoMesh(stdout, d)
	calls := d.Traffic(ctx)
	printDemoCalls(stdout, calls)
	printDemoTry(stdout, d)
	if ctx.Err() == nil {
		fmt.Fprintln(stdout, "The mesh keeps serving until you press Ctrl-C.")
	}
	<-ctx.Done()
	fmt.Fprintln(stdout, "llmesh demo: draining the three nodes...")
	d.Shutdown(context.Background())
	fmt.Fprintln(stdout, "llmesh demo: stopped")
	return 0
}

func printDemoMesh(w io.Writer, d *harness.Demo) {
	fmt.Fprintln(w, "\nThe mesh:")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  NODE\tREGION\tJURISDICTION\tAPI")
	for _, n := range d.Nodes {
		st := n.Status(context.Background())
		fmt.Fprintf(tw, "  %s\t%s\t%s\thttp://%s\n", st.Node, st.Region, st.Jurisdiction, n.HTTPAddr())
	}
	tw.Flush()
	fmt.Fprintln(w, `
Providers: gpu-eu (a self-hosted GPU cluster of 3 replicas that only eu-west reaches; llama-3-8b, cheapest),
           azure-eu (Azure OpenAI, eu), azure-us (Azure OpenAI, us), openai-us (OpenAI, us; also llama-3-8b, dearer).
Tenants:   acme (data stays in the eu, $5/day), globex (data stays in the us, $5/day),
           initech (anywhere, but only $0.0001 in all).`)
}

func printDemoCalls(w io.Writer, calls []harness.DemoCall) {
	fmt.Fprintln(w, "\nWhere the requests went:")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  TENANT\tRESIDENCY\tENTERED AT\tMODEL\tSESSION\tANSWER\tPROVIDER\tREPLICA\tCALLED BY")
	for _, c := range calls {
		answer := fmt.Sprint(c.Status)
		if c.Code != "" {
			answer += " " + c.Code
		}
		if c.Retries > 0 {
			answer += fmt.Sprintf(" (after %d×429)", c.Retries)
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", c.Tenant, dash(c.Residency), c.Entry, c.Model, dash(c.Session),
			answer, dash(c.Provider), dash(c.Replica), dash(c.Via))
	}
	tw.Flush()
	fmt.Fprintln(w, "\nWhy (X-LLMesh-Route of a few):")
	seen := map[string]bool{}
	for _, c := range calls {
		key := c.Tenant + c.Entry + c.Model
		if c.Route == "" || seen[key] || c.Session != "" {
			continue
		}
		seen[key] = true
		if len(seen) > 6 {
			break
		}
		fmt.Fprintf(w, "  %s at %s, %s:\n    %s\n", c.Tenant, c.Entry, c.Model, c.Route)
	}
}

func printDemoTry(w io.Writer, d *harness.Demo) {
	acme := d.Tenants[0]
	us := d.Nodes[1].HTTPAddr()
	fmt.Fprintf(w, "\nTry it (acme's data stays in the eu even when it enters at the us node):\n")
	fmt.Fprintf(w, "  curl -si http://%s/v1/chat/completions -H \"Authorization: Bearer %s\" \\\n", us, acme.Key)
	fmt.Fprintf(w, "    -H 'Content-Type: application/json' -d '{\"model\":\"llama-3-8b\",\"messages\":[{\"role\":\"user\",\"content\":\"Hello\"}]}' | grep -i '^x-llmesh\\|content'\n")
	fmt.Fprintf(w, "  llmesh status -addr http://%s\n  llmesh members -addr http://%s\n  llmesh budgets -addr http://%s\n", us, us, us)
	fmt.Fprintf(w, "Dashboard: http://%s/ui/ (any node's)\n", d.Nodes[0].HTTPAddr())
	fmt.Fprintf(w, "Keys: %s\n\n", strings.Join(func() []string {
		var out []string
		for _, t := range d.Tenants {
			out = append(out, t.Name+"="+t.Key)
		}
		return out
	}(), "  "))
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
