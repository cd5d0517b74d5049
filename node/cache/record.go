package cache

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Sink is where an answer is written: the client's response (the
// executor's route.ResponseSink, which it matches).
type Sink interface {
	Header() http.Header
	WriteHeader(status int)
	Write(p []byte) (int, error)
	Flush() error
}

// replayed are the answer headers an entry keeps: its content type and
// framing, and the provider (and replica, and the provider's own name
// for the model) that made it. The node, route, request id, cost and
// cache headers are the hit's own.
var replayed = [...]string{"Content-Type", "Cache-Control", "X-Accel-Buffering", "X-Llmesh-Provider", "X-Llmesh-Replica", "X-Llmesh-Upstream-Model"}

// Recorder passes an answer on to a Sink and keeps a copy of it, up to a
// limit, to store once it is known to be complete.
type Recorder struct {
	Sink
	limit  int64
	status int
	header http.Header
	buf    []byte
	over   bool
	pool   *Cache // whose recordings in flight it counts in; nil: none
	held   int64  // what it counts there
}

// NewRecorder records what is written to s, up to limit bytes: past it
// the copy is dropped and the answer is not stored. Cache.Recorder
// bounds the recordings in flight too.
func NewRecorder(s Sink, limit int64) *Recorder { return &Recorder{Sink: s, limit: limit} }

// Release gives back to the cache what the recorder held; its entry, if
// stored, is counted there since. It may be called more than once.
func (r *Recorder) Release() {
	if r.pool != nil && r.held > 0 {
		r.pool.recording.Add(-r.held)
		r.held = 0
	}
}

// WriteHeader notes the status and the headers to keep, and passes them
// on.
func (r *Recorder) WriteHeader(status int) {
	r.status = status
	r.header = http.Header{}
	h := r.Sink.Header()
	for _, k := range replayed {
		if v := h[k]; len(v) > 0 {
			r.header[k] = append([]string(nil), v...)
		}
	}
	r.Sink.WriteHeader(status)
}

// Write passes p on and keeps a copy of it.
func (r *Recorder) Write(p []byte) (int, error) {
	if !r.over {
		r.keep(p)
	}
	return r.Sink.Write(p)
}

// keep copies p, or drops the copy for good past the recorder's limit or
// the cache's bound on the recordings in flight.
func (r *Recorder) keep(p []byte) {
	n := int64(len(p))
	if int64(len(r.buf))+n > r.limit || r.pool != nil && !r.pool.take(n) {
		r.over, r.buf = true, nil
		r.Release()
		return
	}
	if r.pool != nil {
		r.held += n
	}
	r.buf = append(r.buf, p...)
}

// Entry is the recorded answer as an entry to store, made by provider: a
// 200's body, or a stream's events (a Content-Type of
// text/event-stream) with their comments left out. A usage's cost is
// rewritten as 0: a replay costs nothing. It reports false when there is
// nothing to store: another status, or an answer past the limit.
func (r *Recorder) Entry(provider string, now time.Time) (*Entry, bool) {
	if r.status != http.StatusOK || r.over || len(r.buf) == 0 {
		return nil, false
	}
	e := &Entry{Header: r.header, Provider: provider, Stored: now}
	if !strings.HasPrefix(r.header.Get("Content-Type"), "text/event-stream") {
		e.Body = zeroCost(r.buf)
		return e, true
	}
	e.Events = [][]byte{}
	for ev := range bytes.SplitAfterSeq(r.buf, []byte("\n\n")) {
		if ev = withoutComments(ev); len(ev) > 0 {
			e.Events = append(e.Events, ev)
		}
	}
	return e, len(e.Events) > 0
}

// withoutComments returns the event ev with its comment lines (": ...",
// keep-alives and notes such as a cost) left out; nil when nothing else
// is left.
func withoutComments(ev []byte) []byte {
	if !bytes.HasPrefix(ev, []byte(":")) && !bytes.Contains(ev, []byte("\n:")) {
		return zeroEventCost(ev)
	}
	var out []byte
	for line := range bytes.SplitAfterSeq(ev, []byte("\n")) {
		if !bytes.HasPrefix(line, []byte(":")) {
			out = append(out, line...)
		}
	}
	if len(bytes.TrimSpace(out)) == 0 {
		return nil
	}
	return zeroEventCost(out)
}

// zeroEventCost is zeroCost of an event's one data line.
func zeroEventCost(ev []byte) []byte {
	i := bytes.Index(ev, []byte("data: {"))
	if i < 0 || !bytes.Contains(ev, []byte(`"cost"`)) {
		return ev
	}
	end := bytes.IndexByte(ev[i:], '\n')
	if end < 0 {
		return ev
	}
	data := ev[i+len("data: ") : i+end]
	z := zeroCost(data)
	if len(z) == len(data) && bytes.Equal(z, data) {
		return ev
	}
	return append(append(append([]byte(nil), ev[:i+len("data: ")]...), z...), ev[i+end:]...)
}

// zeroCost returns the JSON object doc with its top-level usage's cost
// member, if it has one, set to 0; every other byte as it was.
func zeroCost(doc []byte) []byte {
	if !bytes.Contains(doc, []byte(`"cost"`)) {
		return doc
	}
	var top map[string]json.RawMessage
	if json.Unmarshal(doc, &top) != nil {
		return doc
	}
	var usage map[string]json.RawMessage
	raw := top["usage"]
	if json.Unmarshal(raw, &usage) != nil || usage["cost"] == nil {
		return doc
	}
	at, n := memberValue(raw, "cost"), len(usage["cost"])
	i := bytes.Index(doc, raw)
	if at < 0 || i < 0 {
		return doc
	}
	at += i
	return append(append(append([]byte(nil), doc[:at]...), '0'), doc[at+n:]...)
}

// memberValue returns where the value of obj's top-level member key
// starts, or -1.
func memberValue(obj []byte, key string) int {
	d := json.NewDecoder(bytes.NewReader(obj))
	if t, err := d.Token(); err != nil || t != json.Delim('{') {
		return -1
	}
	for d.More() {
		k, err := d.Token()
		if err != nil {
			return -1
		}
		if k == key {
			j := int(d.InputOffset())
			for j < len(obj) && strings.IndexByte(" \t\r\n:", obj[j]) >= 0 {
				j++
			}
			return j
		}
		var skip json.RawMessage
		if d.Decode(&skip) != nil {
			return -1
		}
	}
	return -1
}

// Replay writes e to s as its answer was written: its headers (and
// extra's, set after them), then its body, or its events one by one,
// each flushed, with last, when given, as the stream's last event before
// its "data: [DONE]" (after its last event when it has none): a note
// such as its cost, which the recording left out. It returns the first
// error writing to s: the client is gone.
func (e *Entry) Replay(s Sink, extra func(http.Header), last []byte) error {
	h := s.Header()
	for k, v := range e.Header {
		h[k] = v
	}
	if extra != nil {
		extra(h)
	}
	if !e.Stream() {
		h["Content-Length"] = []string{strconv.Itoa(len(e.Body))}
		s.WriteHeader(http.StatusOK)
		_, err := s.Write(e.Body)
		return err
	}
	s.WriteHeader(http.StatusOK)
	for i, ev := range e.Events {
		if last != nil && i == len(e.Events)-1 && bytes.HasPrefix(ev, done) {
			if _, err := s.Write(last); err != nil {
				return err
			}
			last = nil
		}
		if _, err := s.Write(ev); err != nil {
			return err
		}
		if err := s.Flush(); err != nil {
			return err
		}
	}
	if last != nil {
		if _, err := s.Write(last); err != nil {
			return err
		}
		return s.Flush()
	}
	return nil
}

// done opens a chat or completions stream's last event.
var done = []byte("data: [DONE]")
