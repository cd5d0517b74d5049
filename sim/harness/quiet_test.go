package harness_test

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/llmesh/llmesh/sim/harness"
)

// QuietLogs shows the Raft and memberlist libraries' lines below ERROR,
// and their errors of a closed connection or a deposed leader, at DEBUG
// only; the node's own records and the libraries' other errors keep their
// level, and loggers of other components are left alone.
func TestQuietLogs(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(harness.QuietLogs(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo})))
	raft, gossip := log.With("component", "raft"), log.With("node", "dev").With("component", "gossip")
	raft.Warn("raft: no known peers, aborting election")
	raft.Info("raft: entering follower state")
	gossip.Warn("memberlist: failed to ping")
	raft.Info("raft cluster bootstrapped")
	raft.Error("raft: failed to take snapshot")
	gossip.Error("memberlist: Failed to send indirect UDP ping: write udp: use of closed network connection")
	raft.Error("raft: peer has newer term, stopping replication: peer=\"{Voter eu-1 127.0.0.1:45333}\"")
	log.With("component", "route").Warn("raft: not a library line here")
	got := buf.String()
	for _, hidden := range []string{"aborting election", "follower state", "failed to ping", "indirect UDP ping", "newer term"} {
		if strings.Contains(got, hidden) {
			t.Errorf("%q shown:\n%s", hidden, got)
		}
	}
	for _, shown := range []string{"level=INFO msg=\"raft cluster bootstrapped\"", "level=ERROR msg=\"raft: failed to take snapshot\"", "not a library line"} {
		if !strings.Contains(got, shown) {
			t.Errorf("%q not shown:\n%s", shown, got)
		}
	}
	buf.Reset()
	debug := slog.New(harness.QuietLogs(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})))
	debug.With("component", "raft").Warn("raft: no known peers, aborting election")
	if !strings.Contains(buf.String(), "level=DEBUG") {
		t.Errorf("at -log-level debug: %q", buf.String())
	}
}
