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
// with and without its journal, in turn. The journal writes nothing on
// the request path: what it may add is a ceiling's check under the
// holders' locks, and a wait when a request outruns the ceilings.
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
	urls := map[string]string{"without": start(false), "with": start(true)}
	c := benchClient(b)
	for _, tc := range []struct {
		name string
		body []byte
	}{{"unary", benchBody}, {"stream", benchStreamBody}} {
		for _, j := range []string{"without", "with"} {
			b.Run(tc.name+"/journal-"+j, func(b *testing.B) {
				for range 200 { // warm the pools, and the escrow's and the share's pace
					doBench(b, c, urls[j], tc.body)
				}
				time.Sleep(200 * time.Millisecond) // a journal record or two: the ceilings follow the pace
				b.ReportAllocs()
				for b.Loop() {
					doBench(b, c, urls[j], tc.body)
				}
			})
		}
	}
}
