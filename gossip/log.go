package gossip

import (
	"bytes"
	"context"
	"log/slog"
)

// logWriter turns memberlist's "[LEVEL] memberlist: ..." lines into slog
// records at the matching level.
type logWriter struct{ log *slog.Logger }

func (w logWriter) Write(p []byte) (int, error) {
	line := bytes.TrimSpace(p)
	// memberlist's log lines start with the date and time.
	if i := bytes.IndexByte(line, '['); i >= 0 {
		line = line[i:]
	}
	level := slog.LevelInfo
	for _, l := range []struct {
		tag   string
		level slog.Level
	}{{"[DEBUG]", slog.LevelDebug}, {"[TRACE]", slog.LevelDebug}, {"[INFO]", slog.LevelInfo}, {"[WARN]", slog.LevelWarn}, {"[ERR]", slog.LevelError}} {
		if bytes.HasPrefix(line, []byte(l.tag)) {
			level = l.level
			line = bytes.TrimSpace(line[len(l.tag):])
			break
		}
	}
	if w.log.Enabled(context.Background(), level) {
		w.log.Log(context.Background(), level, string(line))
	}
	return len(p), nil
}
