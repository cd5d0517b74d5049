package emulator

import (
	"net/http"
	"strings"
	"time"
)

// generated is the text of one choice: the words of the vocabulary, one
// token each, up to a token limit or a stop sequence.
type generated struct {
	pieces []string // as streamed, a token each; the last may be cut short by a stop sequence
	tokens int      // tokens generated, the stop sequence's included
	stop   string   // the stop sequence that ended the text; "" if none did
}

// generate is choice ch of a text whose key is key: n tokens, or fewer
// when one of stops appears, the text then ending before it.
func generate(key uint64, ch, n int, stops []string) generated {
	g := generated{pieces: make([]string, 0, n), tokens: n}
	longest := 0
	for _, s := range stops {
		longest = max(longest, len(s))
	}
	var text strings.Builder
	for i := range n {
		w := word(key, ch, i)
		g.pieces = append(g.pieces, w)
		if longest == 0 {
			continue
		}
		from := max(0, text.Len()-longest+1) // a stop that ends in this word starts after from
		text.WriteString(w)
		if at, stop := firstStop(text.String(), from, stops); stop != "" {
			g.tokens, g.stop = i+1, stop
			g.pieces = cut(g.pieces, at)
			break
		}
	}
	return g
}

// firstStop finds the earliest of stops in s at or after from.
func firstStop(s string, from int, stops []string) (int, string) {
	at, found := -1, ""
	for _, stop := range stops {
		if stop == "" {
			continue
		}
		if i := strings.Index(s[from:], stop); i >= 0 && (at < 0 || from+i < at) {
			at, found = from+i, stop
		}
	}
	return at, found
}

// cut shortens pieces to their first n bytes, dropping empty pieces.
func cut(pieces []string, n int) []string {
	out := pieces[:0]
	for _, p := range pieces {
		if n <= 0 {
			break
		}
		if len(p) > n {
			p = p[:n]
		}
		n -= len(p)
		out = append(out, p)
	}
	return out
}

// text is the choice's text whole.
func (g *generated) text() string { return strings.Join(g.pieces, "") }

// due is when piece i of a stream is due after its headers: TTFT for the
// first token, then one every 1/TPS, as chat streams are paced.
func due(cfg *Config, i int) time.Duration { return cfg.TTFT + tokenTime(cfg, i) }

// whole is how long after the request's arrival a non-streaming answer of
// tokens is due: Latency, TTFT and the rest at TPS.
func (x *exchange) whole(tokens int) time.Time {
	return x.arrived.Add(x.cfg.Latency + x.cfg.TTFT + tokenTime(x.cfg, tokens-1))
}

// sse writes one server-sent event stream.
type sse struct {
	x  *exchange
	rc *http.ResponseController
	t0 time.Time // when the headers went out
}

// startSSE sends the 200 headers of a stream; false if the client has gone.
func (x *exchange) startSSE() (*sse, bool) {
	h := x.w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	x.w.WriteHeader(http.StatusOK)
	x.e.rec.streamStarted()
	s := &sse{x: x, rc: http.NewResponseController(x.w), t0: time.Now()}
	return s, s.rc.Flush() == nil
}

// send writes and flushes b, which holds whole events; false once the
// client has gone.
func (s *sse) send(b []byte) bool {
	if _, err := s.x.w.Write(b); err != nil {
		return false
	}
	return s.rc.Flush() == nil
}

// token waits until piece i of the stream is due (see due), or with an
// engine generated; false once the client has gone.
func (s *sse) token(i int) bool { return s.x.await(i, s.t0.Add(due(s.x.cfg, i))) }

// cutAfter is how many of steps events a stream sends before ModeCut
// aborts it; -1 when the emulator is not cutting.
func (x *exchange) cutAfter(steps int) int {
	if x.e.Mode() == ModeCut {
		return (steps + 1) / 2
	}
	return -1
}
