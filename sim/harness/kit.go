package harness

// The test kit: emulated providers, nodes, meshes and the dev stack
// started for a test and stopped when it ends (t.Cleanup), for node's
// external tests, cmd/llmesh's and deploy's. node's internal tests
// cannot import it (harness imports node).

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/llmesh/llmesh/node"
	"github.com/llmesh/llmesh/sim/emulator"
	"github.com/llmesh/llmesh/sim/harness/wait"
)

// ShutdownTimeout bounds the shutdown of what the kit started, at the
// end of a test.
const ShutdownTimeout = 10 * time.Second

// StartEmulator starts an emulated provider on a loopback port, shut
// down when t ends.
func StartEmulator(t testing.TB, cfg emulator.Config) *emulator.Emulator {
	t.Helper()
	e, err := emulator.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Start("127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), ShutdownTimeout)
		defer cancel()
		_ = e.Shutdown(ctx)
	})
	return e
}

// Logger is a node's logger for a test: nothing, or with -v its warnings
// and errors in the test's log.
func Logger(t testing.TB) *slog.Logger {
	if !testing.Verbose() {
		return slog.New(slog.DiscardHandler)
	}
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// StartNode builds and starts a node, shut down when t ends; a shutdown
// that fails (its drain outlasting ShutdownTimeout, say) fails t. A nil
// opts.Logger is Logger(t).
func StartNode(t testing.TB, cfg *node.Config, opts node.Options) *node.Node {
	t.Helper()
	return start(t, cfg, opts, true)
}

// JoinNode is StartNode for a member of a mesh: its shutdown is not
// checked, since the last members to leave may find no peer to tell.
func JoinNode(t testing.TB, cfg *node.Config, opts node.Options) *node.Node {
	t.Helper()
	return start(t, cfg, opts, false)
}

func start(t testing.TB, cfg *node.Config, opts node.Options, checkShutdown bool) *node.Node {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = Logger(t)
	}
	n, err := node.New(cfg, opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), ShutdownTimeout)
		defer cancel()
		if err := n.Shutdown(ctx); err != nil && checkShutdown {
			t.Errorf("shutdown of %s: %v", n.Name(), err)
		}
	})
	return n
}

// StartMesh starts a node for each configuration (JoinNode), in order,
// each after the first joined through the first's gossip address (unless
// its configuration names seeds of its own), and waits until every node
// sees all of them alive and is ready. opts, if not nil, gives node i's
// options.
func StartMesh(t testing.TB, cfgs []*node.Config, opts func(i int) node.Options) []*node.Node {
	t.Helper()
	var nodes []*node.Node
	for i, cfg := range cfgs {
		if i > 0 && len(cfg.Node.Join) == 0 {
			cfg.Node.Join = []string{nodes[0].Mesh().Addr()}
		}
		var o node.Options
		if opts != nil {
			o = opts(i)
		}
		nodes = append(nodes, JoinNode(t, cfg, o))
	}
	AwaitMesh(t, 30*time.Second, nodes...)
	return nodes
}

// AwaitMesh waits until each node sees every one of nodes alive and is
// ready.
func AwaitMesh(t testing.TB, within time.Duration, nodes ...*node.Node) {
	t.Helper()
	wait.For(t, within, "every node to see every other, and be ready", func() bool {
		for _, nd := range nodes {
			alive := 0
			for _, mem := range nd.Mesh().Members() {
				if mem.State == "alive" {
					alive++
				}
			}
			if alive != len(nodes) || !nd.Ready() {
				return false
			}
		}
		return true
	})
}

// StartDevNode starts the dev stack of `llmesh agent -dev` (StartDev) and
// its node on loopback ports, and returns once the node is ready; both
// stop when t ends.
func StartDevNode(t testing.TB) (*Dev, *node.Node) {
	t.Helper()
	dev, err := StartDev("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = dev.Shutdown(context.Background()) })
	n := StartNode(t, dev.Config, node.Options{LedgerTuning: DevLedger})
	wait.For(t, 20*time.Second, "the dev node to be ready", n.Ready)
	return dev, n
}

// KeySHA256 is an API key's SHA-256 in hex, as a tenant's key_sha256
// lists it.
func KeySHA256(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}

// FreePorts returns n loopback TCP ports that were free a moment ago, for
// configurations that must name their ports before a process starts.
func FreePorts(t testing.TB, n int) []int {
	t.Helper()
	var ports []int
	var lns []net.Listener
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns = append(lns, ln)
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	for _, ln := range lns {
		_ = ln.Close()
	}
	return ports
}
