package harness

import (
	"context"
	"log/slog"
	"strings"
)

// QuietLogs wraps h for `llmesh agent -dev` and `llmesh demo`: what the
// Raft and memberlist libraries say below ERROR (a single node's "no
// known peers, aborting election", elections and heartbeats on start,
// state changes), and their errors of a connection a stopping peer
// closed or of a leader deposed by an election, is logged at DEBUG, shown with -log-level debug only. On
// one machine it is expected, not a thing to act on; the node's own
// records, and the libraries' other errors, keep their level. Agents with a
// configuration file do not use it.
func QuietLogs(h slog.Handler) slog.Handler { return quietHandler{h: h} }

// quietHandler is QuietLogs's handler; lib is set once the logger is
// a component's that relays a library's lines (component=raft or gossip).
type quietHandler struct {
	h   slog.Handler
	lib bool
}

func (q quietHandler) Enabled(ctx context.Context, l slog.Level) bool { return q.h.Enabled(ctx, l) }

func (q quietHandler) Handle(ctx context.Context, r slog.Record) error {
	if q.lib && isLibraryLine(r.Message) && (r.Level < slog.LevelError || isClosing(r.Message)) {
		if !q.h.Enabled(ctx, slog.LevelDebug) {
			return nil
		}
		r.Level = slog.LevelDebug
	}
	return q.h.Handle(ctx, r)
}

func (q quietHandler) WithAttrs(as []slog.Attr) slog.Handler {
	lib := q.lib
	for _, a := range as {
		if a.Key == "component" {
			v := a.Value.String()
			lib = v == "raft" || v == "gossip"
		}
	}
	return quietHandler{h: q.h.WithAttrs(as), lib: lib}
}

func (q quietHandler) WithGroup(name string) slog.Handler {
	return quietHandler{h: q.h.WithGroup(name), lib: q.lib}
}

// isLibraryLine reports whether msg is a line relayed from hashicorp/raft
// ("raft: ...") or memberlist ("memberlist: ...") rather than the node's
// own.
func isLibraryLine(msg string) bool {
	return strings.HasPrefix(msg, "raft: ") || strings.HasPrefix(msg, "memberlist: ")
}

// isClosing reports whether a library's error is one that nodes sharing
// one machine cause and heal by themselves: a connection closed under it
// or refused, as when the demo's nodes stop one after another, or a
// leader deposed by a newer term, as when a busy machine delays its
// heartbeats and a voter starts an election.
func isClosing(msg string) bool {
	for _, s := range []string{"use of closed network connection", "connection reset by peer", "connection refused", "peer has newer term"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}
