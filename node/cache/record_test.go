package cache

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"
)

// flushSink is a Sink over a recorder that counts flushes and may fail.
type flushSink struct {
	*httptest.ResponseRecorder
	flushes int
	fail    bool
}

func (s *flushSink) Flush() error {
	s.flushes++
	if s.fail {
		return errors.New("client gone")
	}
	return nil
}

func (s *flushSink) Write(p []byte) (int, error) {
	if s.fail {
		return 0, errors.New("client gone")
	}
	return s.ResponseRecorder.Write(p)
}

func newSink() *flushSink { return &flushSink{ResponseRecorder: httptest.NewRecorder()} }

const answer = `{"id":"chatcmpl-1","object":"chat.completion","model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}`

// A whole answer is recorded as the client got it, and replayed so: the
// same body, the provider's headers, the hit's own.
func TestRecordAndReplayWhole(t *testing.T) {
	live := newSink()
	r := NewRecorder(live, 1<<20)
	h := r.Header()
	h.Set("Content-Type", "application/json")
	h.Set("X-Llmesh-Provider", "azure-eu")
	h.Set("X-Llmesh-Route", "policy=cost; chose azure-eu")
	h.Set("X-Llmesh-Node", "eu-1")
	r.WriteHeader(200)
	_, _ = r.Write([]byte(answer[:40]))
	_, _ = r.Write([]byte(answer[40:]))
	e, ok := r.Entry("azure-eu", time.Unix(1, 0))
	if !ok || e.Stream() || string(e.Body) != answer || e.Header.Get("X-Llmesh-Route") != "" || e.Header.Get("X-Llmesh-Node") != "" {
		t.Fatalf("entry %+v %v", e, ok)
	}
	hit := newSink()
	if err := e.Replay(hit, func(h http.Header) { h.Set("X-Llmesh-Cache", "hit") }, nil); err != nil {
		t.Fatal(err)
	}
	if hit.Code != 200 || hit.Body.String() != live.Body.String() || hit.Header().Get("X-Llmesh-Provider") != "azure-eu" ||
		hit.Header().Get("Content-Length") != strconv.Itoa(len(answer)) || hit.Header().Get("X-Llmesh-Cache") != "hit" {
		t.Fatalf("replay %d %v %s", hit.Code, hit.Header(), hit.Body)
	}
}

// A stream is recorded as its events, comments left out, and replayed
// event by event, each flushed.
func TestRecordAndReplayStream(t *testing.T) {
	events := []string{
		`data: {"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"h"}}]}` + "\n\n",
		": keep-alive\n\n",
		`data: {"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}` + "\n\n",
		`data: {"id":"c","object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":1,"cost":0.000012}}` + "\n\n",
		": cost=0.000012\ndata: [DONE]\n\n",
	}
	live := newSink()
	r := NewRecorder(live, 1<<20)
	r.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
	r.WriteHeader(200)
	_, _ = r.Write([]byte(events[0] + events[1])) // events arriving together
	for _, ev := range events[2:] {
		_, _ = r.Write([]byte(ev))
	}
	e, ok := r.Entry("p", time.Unix(1, 0))
	if !ok || !e.Stream() || len(e.Events) != 4 {
		t.Fatalf("entry %q %v", e.Events, ok)
	}
	want := []string{events[0], events[2], strings.Replace(events[3], "0.000012", "0", 1), "data: [DONE]\n\n"}
	for i, ev := range e.Events {
		if string(ev) != want[i] {
			t.Errorf("event %d: %q, want %q", i, ev, want[i])
		}
	}
	hit := newSink()
	if err := e.Replay(hit, nil, nil); err != nil {
		t.Fatal(err)
	}
	if hit.Body.String() != strings.Join(want, "") || hit.flushes != 4 || hit.Header().Get("Content-Length") != "" {
		t.Fatalf("replay: %d flushes, %q", hit.flushes, hit.Body)
	}
	gone := newSink()
	gone.fail = true
	if err := e.Replay(gone, nil, nil); err == nil {
		t.Fatal("a replay to a client gone did not fail")
	}
}

// Nothing is stored of an error, of an answer past the limit, or of an
// empty one.
func TestRecordRefuses(t *testing.T) {
	for _, c := range []struct {
		name   string
		status int
		limit  int64
		body   string
	}{
		{"error", 400, 1 << 20, `{"error":{}}`},
		{"over the limit", 200, 100, answer},
		{"empty", 200, 100, ""},
	} {
		r := NewRecorder(newSink(), c.limit)
		r.Header().Set("Content-Type", "application/json")
		r.WriteHeader(c.status)
		_, _ = r.Write([]byte(c.body))
		if e, ok := r.Entry("p", time.Unix(1, 0)); ok {
			t.Errorf("%s: stored %+v", c.name, e)
		}
	}
}

func TestZeroCost(t *testing.T) {
	for in, want := range map[string]string{
		answer: answer,
		`{"usage":{"prompt_tokens":3, "cost" : 1.5e-6,"completion_tokens":1},"x":{"cost":2}}`: `{"usage":{"prompt_tokens":3, "cost" : 0,"completion_tokens":1},"x":{"cost":2}}`,
		`{"x":{"cost":2},"usage":{"details":{"cost":3},"cost":4}}`:                            `{"x":{"cost":2},"usage":{"details":{"cost":3},"cost":0}}`,
		`{"usage":null,"cost":1}`: `{"usage":null,"cost":1}`,
		`not json "cost"`:         `not json "cost"`,
	} {
		if got := string(zeroCost([]byte(in))); got != want {
			t.Errorf("%s: %s, want %s", in, got, want)
		}
	}
}

// BenchmarkHit is what a hit costs the node: the request's key from its
// body, the lookup, and the replay of a whole answer.
func BenchmarkHit(b *testing.B) {
	c := New(Config{TTL: time.Hour, MaxBytes: 256 << 20})
	body := []byte(`{"model":"gpt-4o-mini","temperature":0,"max_tokens":64,"messages":[{"role":"system","content":"You are a concise assistant for a support desk."},{"role":"user","content":"` +
		strings.Repeat("How do I reset my password? ", 20) + `"}]}`)
	scope := Scope{Tenant: "acme", Residency: "eu", Endpoint: "chat", Model: "gpt-4o-mini"}
	r, _ := Inspect(scope, body)
	c.Put(r.Key, &Entry{Body: []byte(answer), Header: http.Header{"Content-Type": {"application/json"}}}, time.Now())
	sink := &discard{h: http.Header{}}
	b.ReportAllocs()
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		r, err := Inspect(scope, body)
		if err != nil || !r.Reusable {
			b.Fatal(err)
		}
		e, ok := c.Get(r.Key, time.Now())
		if !ok {
			b.Fatal("miss")
		}
		clear(sink.h)
		if err := e.Replay(sink, nil, nil); err != nil {
			b.Fatal(err)
		}
	}
}

type discard struct{ h http.Header }

func (d *discard) Header() http.Header         { return d.h }
func (d *discard) WriteHeader(int)             {}
func (d *discard) Write(p []byte) (int, error) { return len(p), nil }
func (d *discard) Flush() error                { return nil }

// The copies recorders in flight hold are bounded by MaxBytes together,
// however many answers are on their way: past it a recorder drops its
// copy (the answer still passes on) and stores nothing; what each held
// is given back when released.
func TestRecordingsBounded(t *testing.T) {
	c := New(Config{TTL: time.Hour, MaxBytes: 1 << 20})
	chunk := []byte(strings.Repeat("x", 60<<10)) // under MaxEntry, 64 KiB
	var recs []*Recorder
	dropped := 0
	for range 20 {
		live := newSink()
		r := c.Recorder(live)
		r.Header().Set("Content-Type", "application/json")
		r.WriteHeader(200)
		if _, err := r.Write(chunk); err != nil || live.Body.Len() != len(chunk) {
			t.Fatalf("the answer did not pass on: %v", err)
		}
		if got := c.recording.Load(); got > 1<<20 {
			t.Fatalf("recordings in flight hold %d bytes, over MaxBytes", got)
		}
		if _, ok := r.Entry("p", time.Unix(1, 0)); !ok {
			dropped++
		}
		recs = append(recs, r)
	}
	if want := 20 - (1<<20)/len(chunk); dropped != want {
		t.Fatalf("%d recorders dropped their copies, want %d", dropped, want)
	}
	for _, r := range recs {
		r.Release()
		r.Release()
	}
	if got := c.recording.Load(); got != 0 {
		t.Fatalf("%d bytes still counted once every recorder is released", got)
	}
	r := c.Recorder(newSink())
	r.WriteHeader(200)
	_, _ = r.Write(chunk)
	if _, ok := r.Entry("p", time.Unix(1, 0)); !ok {
		t.Fatal("a recorder after the others were released dropped its copy")
	}
}
