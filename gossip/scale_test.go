package gossip

import (
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/llmesh/llmesh/sim/harness/wait"
)

// lanCluster starts n nodes with memberlist's LAN timings and waits until
// every node sees all of them.
func lanCluster(b *testing.B, n int) []*testNode {
	b.Helper()
	nodes := testCluster(b, n, func(i int, c *Config) {
		c.Memberlist = memberlist.DefaultLANConfig
		c.PublishInterval = time.Hour // broadcasts are driven by the benchmark
	})
	wait.Every(10*time.Millisecond).For(b, 2*time.Minute, fmt.Sprintf("every node to see %d members", n), func() bool {
		for _, nd := range nodes {
			if nd.mesh.numMembers() != n {
				return false
			}
		}
		return true
	})
	return nodes
}

// BenchmarkBroadcast measures how long one observation takes to reach
// every node of the mesh (memberlist LAN timings: gossip every 200 ms to 3
// nodes), and what gossip costs each node in bytes per second while one
// observation a second is being spread.
func BenchmarkBroadcast(b *testing.B) {
	for _, n := range []int{8, 32, 64} {
		b.Run(fmt.Sprintf("nodes=%d", n), func(b *testing.B) {
			nodes := lanCluster(b, n)
			r := rand.New(rand.NewPCG(uint64(n), 1))
			var spread []time.Duration
			stragglers := 0
			var sent0 uint64
			for _, nd := range nodes {
				s, _ := nd.mesh.Bytes()
				sent0 += s
			}
			t0 := time.Now()
			version := uint64(time.Now().UnixNano())
			for b.Loop() {
				from := nodes[r.IntN(n)]
				version++
				o := Observation{Observer: from.cfg.Name, Provider: "p", Version: version, TTL: time.Minute, TTFT: time.Duration(version % 1000)}
				start := time.Now()
				from.mesh.st.mergeObservation(o, start)
				from.mesh.queueObservation(from.mesh.st.record(o.Observer, o.Provider))
				for _, nd := range nodes {
					// Gossip reaches almost every node; the rare one it
					// misses gets the report by push/pull anti-entropy,
					// every 30 s scaled up with the mesh's size.
					wait.Every(time.Millisecond).For(b, 3*time.Minute, fmt.Sprintf("%s to hear of version %d", nd.cfg.Name, version),
						func() bool { return has(nd.mesh, o) })
				}
				spread = append(spread, time.Since(start))
				if spread[len(spread)-1] > 5*time.Second {
					stragglers++
				}
				// One observation a second, the load the byte figure is for.
				time.Sleep(max(0, time.Second-time.Since(start))) // pacing: the load is one observation a second
			}
			elapsed := time.Since(t0)
			var sent uint64
			depth := 0
			for _, nd := range nodes {
				s, _ := nd.mesh.Bytes()
				sent += s
				depth = max(depth, nd.mesh.QueueDepth())
			}
			slices.Sort(spread)
			b.ReportMetric(float64(spread[len(spread)/2].Milliseconds()), "p50-ms-to-all")
			b.ReportMetric(float64(spread[len(spread)-1].Milliseconds()), "max-ms-to-all")
			b.ReportMetric(float64(spread[len(spread)*9/10].Milliseconds()), "p90-ms-to-all")
			b.ReportMetric(float64(stragglers), "needed-anti-entropy")
			b.ReportMetric(float64(sent-sent0)/elapsed.Seconds()/float64(n), "bytes/s/node")
			b.ReportMetric(0, "ns/op")
		})
	}
}

func has(m *Mesh, o Observation) bool {
	m.st.mu.RLock()
	defer m.st.mu.RUnlock()
	r := m.st.obs[obsKey{o.Observer, o.Provider}]
	return r != nil && r.Version >= o.Version
}

// BenchmarkQueueUnderChurn runs a 32-node mesh in which every node
// reports ten providers whose figures keep changing, while nodes are
// killed and new ones join, and reports the deepest broadcast queue seen:
// the queue holds one message per subject and is pruned, so it stays
// bounded however hard the mesh churns.
func BenchmarkQueueUnderChurn(b *testing.B) {
	const n, providers = 32, 10
	nodes := lanCluster(b, n)
	seed := nodes[0].mesh.Addr()
	r := rand.New(rand.NewPCG(7, 7))
	maxDepth, samples, sum := 0, 0, 0
	next := n
	version := uint64(time.Now().UnixNano())
	for b.Loop() {
		// Churn: one node dies, a new one joins.
		victim := 1 + r.IntN(len(nodes)-1)
		_ = nodes[victim].mesh.Shutdown()
		c := nodes[0].cfg
		c.Name, c.BindPort, c.Seeds = fmt.Sprintf("churn%03d", next), 0, []string{seed}
		c.Memberlist = memberlist.DefaultLANConfig
		c.PublishInterval = time.Hour
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
		next++
		nodes[victim] = startTestNode(b, c)
		// A second of changing reports from every node.
		end := time.Now().Add(time.Second)
		for time.Now().Before(end) {
			for _, nd := range nodes {
				version++
				o := Observation{Observer: nd.cfg.Name, Provider: fmt.Sprintf("p%d", r.IntN(providers)), Version: version,
					TTL: 30 * time.Second, TTFT: time.Duration(r.IntN(1000)) * time.Millisecond}
				nd.mesh.st.mergeObservation(o, time.Now())
				nd.mesh.queueObservation(nd.mesh.st.record(o.Observer, o.Provider))
			}
			for _, nd := range nodes {
				d := nd.mesh.QueueDepth()
				maxDepth = max(maxDepth, d)
				sum += d
				samples++
			}
			time.Sleep(100 * time.Millisecond) // pacing: ten rounds of reports a second
		}
	}
	b.ReportMetric(float64(maxDepth), "max-queue")
	b.ReportMetric(float64(sum)/float64(samples), "mean-queue")
	b.ReportMetric(0, "ns/op")
}
