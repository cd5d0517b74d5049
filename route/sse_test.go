package route

import (
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
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
	if u, ok := chunkUsage([]byte(mention)); !ok || u != (Usage{PromptTokens: 3, CompletionTokens: 4}) || !isUsageOnly([]byte(mention)) {
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
	})
}
