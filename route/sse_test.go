package route

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

func readEvents(t *testing.T, in string, max int) ([]string, error) {
	t.Helper()
	rd := newSSEReader(strings.NewReader(in), max)
	var out []string
	for {
		ev, err := rd.next()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return out, err
		}
		if ev.Comment {
			out = append(out, ":")
			continue
		}
		out = append(out, string(ev.Data))
	}
}

func TestSSEReader(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     []string
	}{
		{"openai", "data: {\"a\":1}\n\ndata: [DONE]\n\n", []string{`{"a":1}`, "[DONE]"}},
		{"crlf and no space", "data:{\"a\":1}\r\n\r\ndata: [DONE]\r\n\r\n", []string{`{"a":1}`, "[DONE]"}},
		{"multi-line data", "data: a\ndata: b\n\n", []string{"a\nb"}},
		{"comments and fields", ": ping\n\nevent: x\nid: 3\nretry: 10\ndata: z\n\n", []string{":", "z"}},
		{"no final blank line", "data: a\n\ndata: [DONE]\n", []string{"a", "[DONE]"}},
		{"no final newline", "data: a\n\ndata: [DONE]", []string{"a", "[DONE]"}},
		{"blank lines between", "\n\n\ndata: a\n\n\n\n", []string{"a"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := readEvents(t, tc.in, 1<<20)
			if err != nil || !equal(got, tc.want) {
				t.Fatalf("got %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

func TestSSEReaderBoundsEvents(t *testing.T) {
	long := "data: " + strings.Repeat("x", 100<<10) + "\n\n"
	if _, err := readEvents(t, long, 64<<10); !errors.Is(err, errEventTooLarge) {
		t.Fatalf("one long line: got %v, want errEventTooLarge", err)
	}
	many := strings.Repeat("data: "+strings.Repeat("y", 1000)+"\n", 100) + "\n"
	if _, err := readEvents(t, many, 64<<10); !errors.Is(err, errEventTooLarge) {
		t.Fatalf("many data lines: got %v, want errEventTooLarge", err)
	}
	// A long but allowed line (longer than the read buffer) is whole.
	ok := "data: " + strings.Repeat("z", 40<<10) + "\n\n"
	got, err := readEvents(t, ok, 64<<10)
	if err != nil || len(got) != 1 || len(got[0]) != 40<<10 {
		t.Fatalf("40 KiB event: %v, %d events", err, len(got))
	}
}

func TestChunkInspection(t *testing.T) {
	usage := `{"id":"x","choices":[],"usage":{"prompt_tokens":5,"completion_tokens":7,"total_tokens":12}}`
	if u, ok := chunkUsage([]byte(usage)); !ok || u.PromptTokens != 5 || u.CompletionTokens != 7 || !isUsageOnly([]byte(usage)) {
		t.Fatalf("usage chunk: %+v %v", u, ok)
	}
	spaced := `{"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}], "usage": {"prompt_tokens": 1, "completion_tokens": 2}}`
	if u, ok := chunkUsage([]byte(spaced)); !ok || u.CompletionTokens != 2 || isUsageOnly([]byte(spaced)) {
		t.Fatalf("spaced usage: %+v %v", u, ok)
	}
	if countFinishes([]byte(spaced)) != 1 {
		t.Fatal("finish_reason with spaces not counted")
	}
	plain := `{"choices":[{"index":0,"delta":{"content":"\"usage\":{ finish_reason"},"finish_reason":null}],"usage":null}`
	if _, ok := chunkUsage([]byte(plain)); ok || countFinishes([]byte(plain)) != 0 {
		t.Fatal("content that mentions usage or a null finish_reason was taken for one")
	}
	two := `{"choices":[{"index":0,"finish_reason":"stop"},{"index":1,"finish_reason":"length"}]}`
	if countFinishes([]byte(two)) != 2 {
		t.Fatal("two finishes not counted")
	}
	// Content that mentions a usage key before the real one, with
	// details, and chunks that are cut short or broken.
	mention := `{"choices":[],"x":"a,\"usage\":{\"prompt_tokens\":9}","usage":{"prompt_tokens":3,"completion_tokens":4,"prompt_tokens_details":{"cached_tokens":1}}}`
	if u, ok := chunkUsage([]byte(mention)); !ok || u != (Usage{PromptTokens: 3, CompletionTokens: 4, CachedTokens: 1}) || !isUsageOnly([]byte(mention)) {
		t.Fatalf("usage after a mention: %+v %v", u, ok)
	}
	for _, bad := range []string{`{"usage":{"prompt_tokens":3`, `{"usage":`, `{"usage"`, `{"usage":{"prompt_tokens":"3"}}`, `{"usage":{"a":"}`} {
		if u, ok := chunkUsage([]byte(bad)); ok {
			t.Fatalf("%s: took %+v", bad, u)
		}
	}
	if isUsageOnly([]byte(`{"choices":[{}],"usage":{}}`)) || !isUsageOnly([]byte(`{"choices":null,"usage":{}}`)) || !isUsageOnly([]byte(`{"choices": [ ] ,"usage":{}}`)) {
		t.Fatal("isUsageOnly")
	}
	// Azure's first chunk has no choices; an error event and a chunk with
	// choices or cut short are not it.
	for chunk, want := range map[string]bool{
		`{"choices":[],"created":0,"id":"","model":"","object":"","prompt_filter_results":[]}`: true,
		`{"id":"x", "choices" : [ ] }`:                   true,
		`{"choices":[{"index":0,"delta":{}}]}`:           false,
		`{"error":{"message":"overloaded"}}`:             false,
		`{"choices":null}`:                               false,
		`{"x":"\"choices\":[]","choices":[{"index":0}]}`: false,
		`{"choices":[`:                                   false,
	} {
		if emptyChoices([]byte(chunk)) != want {
			t.Errorf("emptyChoices(%s) = %v", chunk, !want)
		}
	}
}

func FuzzChunkUsage(f *testing.F) {
	f.Add([]byte(`{"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":7}}`))
	f.Add([]byte(`{"usage":{"a":"\"}"}}`))
	f.Add([]byte(`{"choices":[{"usage":{"prompt_tokens":1}}], "usage" : {"prompt_tokens":2} }`))
	f.Fuzz(func(t *testing.T, data []byte) {
		u, ok := chunkUsage(data)
		// Whatever the bytes, no panic; and a usage found in valid JSON
		// is the top-level one.
		var c struct {
			Usage *Usage `json:"usage"`
		}
		if ok && json.Valid(data) && json.Unmarshal(data, &c) == nil && c.Usage != nil && *c.Usage != u {
			t.Fatalf("found %+v, the chunk says %+v", u, *c.Usage)
		}
		_ = isUsageOnly(data)
		// One walk finds what a walk for each would.
		model, noChoices := chunkMembers(data)
		var wantModel []byte
		if v, ok := topValue(data, `"model"`); ok {
			if end := valueEnd(data, v); end > v {
				wantModel = data[v:end]
			}
		}
		if string(model) != string(wantModel) || (model == nil) != (wantModel == nil) || noChoices != emptyChoices(data) {
			t.Fatalf("chunkMembers: model %q, no choices %v; topValue finds %q, %v", model, noChoices, wantModel, emptyChoices(data))
		}
	})
}

// A lone CR ends a line, as in every client: CR CR ends an event.
func TestSSELoneCR(t *testing.T) {
	evs, err := sseEvents(strings.NewReader("data: a\rdata: b\r\rdata: c\r\n\r\n"), 64)
	if err != nil || len(evs) != 2 || string(evs[0].Data) != "a\nb" || string(evs[1].Data) != "c" {
		t.Fatalf("%v %+v", err, evs)
	}
}

// sseEvents parses a whole stream read through r, copying each event.
func sseEvents(r io.Reader, max int) ([]sseEvent, error) {
	rd := newSSEReader(r, max)
	var out []sseEvent
	for {
		ev, err := rd.next()
		if err != nil {
			if err == io.EOF {
				return out, nil
			}
			return out, err
		}
		ev.Data = append([]byte(nil), ev.Data...)
		out = append(out, ev)
	}
}

// FuzzSSEReader holds the relay's stream parser to three properties on any
// bytes a provider may send: it never panics or returns an event above its
// limit; how the bytes arrive (at once, or a byte at a time) changes
// nothing; and the events it relays, written as the node writes them
// (appendEvent), parse back to the same events, so no framing is lost or
// made up on the way to the client.
func FuzzSSEReader(f *testing.F) {
	f.Add([]byte("data: {\"a\":1}\n\ndata: [DONE]\n\n"), 64)
	f.Add([]byte(": keep-alive\n\ndata: x\ndata: y\r\n\r\nevent: e\nid: 1\ndata:z"), 16)
	f.Add([]byte("data: "+strings.Repeat("x", 100)+"\n\n"), 32)
	f.Add([]byte("data\ndata:\n\n\r\n:\n"), 8)
	f.Add([]byte("data:\r\r"), -13) // found by this fuzzer: a lone CR ends a line
	f.Fuzz(func(t *testing.T, stream []byte, max int) {
		max = 1 + abs(max)%(8<<10)
		whole, errWhole := sseEvents(bytes.NewReader(stream), max)
		bytewise, errBytewise := sseEvents(iotest.OneByteReader(bytes.NewReader(stream)), max)
		if (errWhole == nil) != (errBytewise == nil) || len(whole) != len(bytewise) {
			t.Fatalf("chunking changed the parse: %v/%v, %d/%d events", errWhole, errBytewise, len(whole), len(bytewise))
		}
		var relayed []byte
		for i, ev := range whole {
			if len(ev.Data) > max {
				t.Fatalf("event %d of %d bytes above the %d limit", i, len(ev.Data), max)
			}
			if ev.Comment != bytewise[i].Comment || !bytes.Equal(ev.Data, bytewise[i].Data) {
				t.Fatalf("event %d: %q / %q", i, ev.Data, bytewise[i].Data)
			}
			if !ev.Comment {
				relayed = appendEvent(relayed, ev.Data)
			}
		}
		again, err := sseEvents(bytes.NewReader(relayed), max+len(relayed))
		if err != nil {
			t.Fatalf("the relayed stream does not parse: %v", err)
		}
		k := 0
		for _, ev := range whole {
			if ev.Comment {
				continue
			}
			if k >= len(again) || !bytes.Equal(again[k].Data, ev.Data) {
				t.Fatalf("relayed event %d: %q became %v", k, ev.Data, again)
			}
			k++
		}
		if k != len(again) {
			t.Fatalf("%d events relayed, %d parsed back", k, len(again))
		}
	})
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

// emptyChoices reports whether a chunk's choices are an empty array,
// found by topValue: what chunkMembers is held to.
func emptyChoices(data []byte) bool {
	v, ok := topValue(data, `"choices"`)
	if !ok || data[v] != '[' {
		return false
	}
	i := skipSpace(data, v+1)
	return i < len(data) && data[i] == ']'
}
