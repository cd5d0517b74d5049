package node_test

import (
	"testing"
	"time"

	"github.com/llmesh/llmesh/node"
	"github.com/llmesh/llmesh/sim/harness"
)

// BenchmarkJournalPath measures what the spend journal costs a request:
// the same node in front of the same zero-latency emulator, a one-voter
// ledger, a tenant with a budget (every request reserves and settles
// escrow) and a rate-limited provider (every request takes a share),
// with and without its journal, interleaved request by request so that
// machine noise hits both alike. The journal writes nothing on the
// request path: what it may add is a ceiling's check under the holders'
// locks, a wait when a request outruns the ceilings, and its writer's
// CPU beside the requests'.
func BenchmarkJournalPath(b *testing.B) {
	start := func(journal bool) string {
		f := startNodeBy(b, []upstream{{name: "emu", kind: "openai", rpm: 100_000_000}}, func(c *node.Config) {
			c.Node.Voter, c.Node.BootstrapExpect, c.Node.Raft, c.Node.RPC, c.Node.Gossip = true, 1, "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
			c.Node.DataDir = b.TempDir()
			c.Tenants[0].Budget = &node.BudgetSection{USD: 1e6, Period: "total"}
		}, func(tb testing.TB, c *node.Config, o node.Options) *node.Node {
			c.Journal.Disabled = !journal
			o.LedgerTuning = harness.DevLedger
			return harness.StartNode(tb, c, o)
		})
		return f.url + "/v1/chat/completions"
	}
	urls := []string{start(false), start(true)}
	c := benchClient(b)
	for _, tc := range []struct {
		name string
		body []byte
	}{{"unary", benchBody}, {"stream", benchStreamBody}} {
		b.Run(tc.name, func(b *testing.B) {
			send := func(u string) { doBench(b, c, u, tc.body) }
			for range 200 { // warm the pools, and the escrow's and the share's pace
				send(urls[0])
				send(urls[1])
			}
			time.Sleep(200 * time.Millisecond) // a journal record or two: the ceilings follow the pace
			allocs := [2]float64{}
			for i, u := range urls {
				allocs[i] = testing.AllocsPerRun(50, func() { send(u) })
			}
			pct := interleaved(b, urls, send)
			for _, p := range []struct {
				name string
				q    float64
			}{{"p50", 0.5}, {"p99", 0.99}} {
				b.ReportMetric(pct(0, p.q), "without-"+p.name+"-µs")
				b.ReportMetric(pct(1, p.q)-pct(0, p.q), "journal-adds-"+p.name+"-µs")
			}
			b.ReportMetric(allocs[1]-allocs[0], "journal-adds-allocs")
			b.ReportMetric(0, "ns/op")
		})
	}
}
