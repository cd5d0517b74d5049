package consensus

import (
	"bytes"
	"context"
	"log/slog"
)

// logWriter turns the Raft library's hclog lines ("... [WARN]  raft: ...")
// into slog records at the matching level.
type logWriter struct{ log *slog.Logger }

var levels = []struct {
	tag   string
	level slog.Level
}{{"[TRACE]", slog.LevelDebug - 4}, {"[DEBUG]", slog.LevelDebug}, {"[INFO]", slog.LevelInfo}, {"[WARN]", slog.LevelWarn}, {"[ERROR]", slog.LevelError}}

func (w logWriter) Write(p []byte) (int, error) {
	line := bytes.TrimSpace(p)
	level := slog.LevelInfo
	for _, l := range levels {
		if i := bytes.Index(line, []byte(l.tag)); i >= 0 {
			level, line = l.level, bytes.TrimSpace(line[i+len(l.tag):])
			break
		}
	}
	if w.log.Enabled(context.Background(), level) {
		w.log.Log(context.Background(), level, string(line))
	}
	return len(p), nil
}
