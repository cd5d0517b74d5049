package responses_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/openai/openai-go/v3/responses"

	bridge "github.com/llmesh/llmesh/route/responses"
)

// eventRequired is the spec's required members of each stream event.
var eventRequired = map[string][]string{
	"response.created":                       {"type", "response", "sequence_number"},
	"response.in_progress":                   {"type", "response", "sequence_number"},
	"response.completed":                     {"type", "response", "sequence_number"},
	"response.incomplete":                    {"type", "response", "sequence_number"},
	"response.output_item.added":             {"type", "output_index", "item", "sequence_number"},
	"response.output_item.done":              {"type", "output_index", "item", "sequence_number"},
	"response.content_part.added":            {"type", "item_id", "output_index", "content_index", "part", "sequence_number"},
	"response.content_part.done":             {"type", "item_id", "output_index", "content_index", "part", "sequence_number"},
	"response.output_text.delta":             {"type", "item_id", "output_index", "content_index", "delta", "sequence_number", "logprobs"},
	"response.output_text.done":              {"type", "item_id", "output_index", "content_index", "text", "sequence_number", "logprobs"},
	"response.refusal.delta":                 {"type", "item_id", "output_index", "content_index", "delta", "sequence_number"},
	"response.refusal.done":                  {"type", "item_id", "output_index", "content_index", "refusal", "sequence_number"},
	"response.function_call_arguments.delta": {"type", "item_id", "output_index", "delta", "sequence_number"},
	"response.function_call_arguments.done":  {"type", "item_id", "name", "output_index", "arguments", "sequence_number"},
	"error":                                  {"type", "code", "message", "param", "sequence_number"},
}

// sse is chunks as a chat completions stream.
func sse(chunks ...string) string {
	var b strings.Builder
	for _, c := range chunks {
		b.WriteString("data: " + c + "\n\n")
	}
	return b.String()
}

type event struct {
	data []byte
	ev   responses.ResponseStreamEventUnion
}

// parseEvents reads a Responses stream as openai-go does, checking each
// event's name, required members and sequence number.
func parseEvents(t *testing.T, out []byte) []event {
	t.Helper()
	var evs []event
	for _, raw := range strings.Split(strings.TrimSuffix(string(out), "\n\n"), "\n\n") {
		if raw == "" {
			continue
		}
		name, data, ok := strings.Cut(raw, "\n")
		name, ok2 := strings.CutPrefix(name, "event: ")
		data, ok3 := strings.CutPrefix(data, "data: ")
		if !ok || !ok2 || !ok3 || strings.Contains(data, "\n") {
			t.Fatalf("not one event: %q", raw)
		}
		var e event
		e.data = []byte(data)
		if err := json.Unmarshal(e.data, &e.ev); err != nil {
			t.Fatalf("%v in %s", err, data)
		}
		if e.ev.Type != name || e.ev.SequenceNumber != int64(len(evs)) {
			t.Errorf("event %d named %q is %q with sequence_number %d", len(evs), name, e.ev.Type, e.ev.SequenceNumber)
		}
		req, known := eventRequired[e.ev.Type]
		if !known {
			t.Errorf("unexpected event %s", data)
		}
		hasMembers(t, e.ev.Type, e.data, req...)
		if r := e.ev.JSON.Response.Raw(); r != "" && r != "null" {
			hasMembers(t, e.ev.Type+"'s response", json.RawMessage(r), responseRequired...)
		}
		evs = append(evs, e)
	}
	return evs
}

func types(evs []event) string {
	var ts []string
	for _, e := range evs {
		if n := len(ts); n == 0 || ts[n-1] != e.ev.Type {
			ts = append(ts, e.ev.Type)
		}
	}
	return strings.Join(ts, " ")
}

func translate(t *testing.T, in io.Reader, req string) ([]byte, error, *bridge.Stream) {
	t.Helper()
	s := bridge.StreamReader(io.NopCloser(in), []byte(req), "resp_1", 1700000000, 0)
	out, err := io.ReadAll(s)
	return out, err, s
}

var textAndCalls = sse(
	`{"id":"c","model":"llama-3","choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}`,
	`{"id":"c","model":"llama-3","choices":[{"index":0,"delta":{"content":"Let me"},"logprobs":{"content":[{"token":"Let","logprob":-0.1,"bytes":[76],"top_logprobs":[]},{"token":" me","logprob":-0.2,"bytes":[32],"top_logprobs":[]}]}}]}`,
	`{"id":"c","model":"llama-3","choices":[{"index":0,"delta":{"content":" check."}}]}`,
	`{"id":"c","model":"llama-3","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"w","arguments":"{\"ci"}}]}}]}`,
	`{"id":"c","model":"llama-3","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"ty\":\"Paris\"}"}}]}}]}`,
	`{"id":"c","model":"llama-3","choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"call_b","type":"function","function":{"name":"t","arguments":"{}"}}]}}]}`,
	`{"id":"c","model":"llama-3","choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}`,
	`{"id":"c","model":"llama-3","choices":[],"usage":{"prompt_tokens":20,"completion_tokens":11,"total_tokens":31,"prompt_tokens_details":{"cached_tokens":4},"completion_tokens_details":{"reasoning_tokens":2}}}`,
	`[DONE]`)

// Text then two tool calls stream as a message item and two
// function_call items, each event numbered and naming its item, and end
// with the completed response holding what was streamed.
func TestStreamTextAndCalls(t *testing.T) {
	out, err, s := translate(t, strings.NewReader(textAndCalls), `{"input":"x","instructions":"Be brief.","tools":[{"type":"function","name":"w"}]}`)
	if err != nil {
		t.Fatal(err)
	}
	evs := parseEvents(t, out)
	want := "response.created response.in_progress response.output_item.added response.content_part.added response.output_text.delta " +
		"response.output_text.done response.content_part.done response.output_item.done " +
		"response.output_item.added response.function_call_arguments.delta response.output_item.added response.function_call_arguments.delta " +
		"response.function_call_arguments.done response.output_item.done response.function_call_arguments.done response.output_item.done " +
		"response.completed"
	if got := types(evs); got != want {
		t.Fatalf("events %s\nwant   %s", got, want)
	}
	created := evs[0].ev.Response
	if created.ID != "resp_1" || created.Status != "in_progress" || created.Model != "llama-3" || len(created.Output) != 0 ||
		created.Instructions.OfString != "Be brief." || created.JSON.Usage.Valid() {
		t.Errorf("created %s", evs[0].data)
	}
	ids := map[int64]string{} // output_index → item id, from output_item.added
	var text, args [2]string
	var final responses.Response
	for _, e := range evs {
		ev := e.ev
		switch ev.Type {
		case "response.output_item.added":
			ids[ev.OutputIndex] = ev.Item.ID
			if ev.Item.Status != "in_progress" {
				t.Errorf("added %s", e.data)
			}
		case "response.output_text.delta":
			text[0] += ev.Delta
		case "response.output_text.done":
			text[1] = ev.Text
			if lp := ev.AsResponseOutputTextDone().Logprobs; len(lp) != 2 || lp[1].Token != " me" {
				t.Errorf("text done logprobs %s", e.data)
			}
		case "response.function_call_arguments.delta":
			if ev.OutputIndex == 1 {
				args[0] += ev.Delta
			}
		case "response.function_call_arguments.done":
			if ev.OutputIndex == 1 {
				args[1] = ev.Arguments
				if !strings.Contains(string(e.data), `"name":"w"`) { // openai-go has no field for it
					t.Errorf("call done %s", e.data)
				}
			}
		case "response.output_item.done":
			if ev.Item.ID != ids[ev.OutputIndex] || ev.Item.Status != "completed" {
				t.Errorf("item done %s", e.data)
			}
		case "response.completed":
			final = ev.Response
		}
		if ev.ItemID != "" && ev.ItemID != ids[ev.OutputIndex] {
			t.Errorf("item_id %s at output_index %d is not %s", ev.ItemID, ev.OutputIndex, ids[ev.OutputIndex])
		}
	}
	switch {
	case text[0] != "Let me check." || text[1] != text[0] || args[0] != `{"city":"Paris"}` || args[1] != args[0]:
		t.Errorf("text %q, arguments %q", text, args)
	case final.Status != "completed" || final.OutputText() != text[0] || len(final.Output) != 3 || final.Output[0].ID != ids[0]:
		t.Errorf("final %s", final.RawJSON())
	case final.Output[1].CallID != "call_a" || final.Output[1].Arguments.OfString != args[0] || final.Output[2].CallID != "call_b" || final.Output[2].Name != "t":
		t.Errorf("final calls %s", final.RawJSON())
	case final.Usage.InputTokens != 20 || final.Usage.OutputTokens != 11 || final.Usage.TotalTokens != 31 ||
		final.Usage.InputTokensDetails.CachedTokens != 4 || final.Usage.OutputTokensDetails.ReasoningTokens != 2:
		t.Errorf("usage %s", final.Usage.RawJSON())
	case !msgID.MatchString(ids[0]) || !fcID.MatchString(ids[1]) || !fcID.MatchString(ids[2]):
		t.Errorf("ids %v", ids)
	}
	wantAssistant := `[{"role":"assistant","content":"Let me check.","tool_calls":[{"id":"call_a","type":"function","function":{"name":"w","arguments":"{\"city\":\"Paris\"}"}},` +
		`{"id":"call_b","type":"function","function":{"name":"t","arguments":"{}"}}]}]`
	if got := string(s.Assistant()); got != wantAssistant {
		t.Errorf("assistant %s\nwant      %s", got, wantAssistant)
	}
}

// normalize replaces what differs between two translations of one
// stream: the item ids and the completion time.
func normalize(b []byte) string {
	b = regexp.MustCompile(`(msg|fc)_[0-9a-f]{48}`).ReplaceAll(b, []byte("${1}_ID"))
	return string(regexp.MustCompile(`"completed_at":\d+`).ReplaceAll(b, []byte(`"completed_at":0`)))
}

// pieces reads r in pieces of random sizes.
type pieces struct {
	r   io.Reader
	rnd *rand.Rand
}

func (p *pieces) Read(b []byte) (int, error) {
	return p.r.Read(b[:min(len(b), 1+p.rnd.IntN(40))])
}

// However the chat stream's bytes are split, and whichever line ends it
// uses, the events are the same.
func TestStreamSplitAnywhere(t *testing.T) {
	whole, err, _ := translate(t, strings.NewReader(textAndCalls), `{}`)
	if err != nil {
		t.Fatal(err)
	}
	want := normalize(whole)
	for name, in := range map[string]io.Reader{
		"one byte at a time": iotest.OneByteReader(strings.NewReader(textAndCalls)),
		"random pieces":      &pieces{strings.NewReader(textAndCalls), rand.New(rand.NewPCG(1, 2))},
		"CRLF lines":         strings.NewReader(strings.ReplaceAll(textAndCalls, "\n", "\r\n")),
		"comments and names": strings.NewReader(": keep-alive\n\nevent: chunk\n" + strings.Replace(textAndCalls, "\n\n", "\n\n: ping\n\n", 3)),
	} {
		out, err, _ := translate(t, in, `{}`)
		if err != nil || normalize(out) != want {
			t.Errorf("%s: %v\n%s\nwant\n%s", name, err, out, want)
		}
	}
}

// Each chunk is translated as it arrives: the first delta is readable
// before the rest of the stream exists.
func TestStreamIsIncremental(t *testing.T) {
	pr, pw := io.Pipe()
	s := bridge.StreamReader(pr, []byte(`{}`), "resp_1", 1, 0)
	go func() {
		_, _ = io.WriteString(pw, sse(`{"model":"m","choices":[{"index":0,"delta":{"content":"Hel"}}]}`))
	}()
	got := make(chan string, 1)
	go func() {
		var seen []byte
		buf := make([]byte, 64)
		for !bytes.Contains(seen, []byte(`"delta":"Hel"`)) {
			n, err := s.Read(buf)
			if err != nil {
				got <- err.Error()
				return
			}
			seen = append(seen, buf[:n]...)
		}
		got <- "delta"
	}()
	select {
	case g := <-got:
		if g != "delta" {
			t.Fatal(g)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the first delta waited for the rest of the stream")
	}
	go func() {
		_, _ = io.WriteString(pw, sse(`{"choices":[{"index":0,"delta":{"content":"lo"},"finish_reason":"stop"}]}`, "[DONE]"))
		_ = pw.Close()
	}()
	rest, err := io.ReadAll(s)
	if err != nil || !strings.Contains(string(rest), `"text":"Hello"`) || !strings.Contains(string(rest), "response.completed") {
		t.Errorf("rest %v %s", err, rest)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := pw.Write([]byte("x")); !errors.Is(err, io.ErrClosedPipe) {
		t.Errorf("Close left the chat stream open: %v", err)
	}
}

// A chat stream that breaks off never reads as completed: the relay
// tells a broken stream by its missing terminal event.
func TestStreamBroken(t *testing.T) {
	start := sse(`{"model":"m","choices":[{"index":0,"delta":{"content":"Hal"}}]}`,
		`{"model":"m","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c","function":{"name":"f","arguments":"{"}}]}}]}`)
	for _, tc := range []struct {
		name string
		in   io.Reader
		is   error
	}{
		{"ends without a finish", strings.NewReader(start), io.ErrUnexpectedEOF},
		{"ends mid-event", strings.NewReader(start + `data: {"choices":[{"index":0,"delta":{"cont`), nil},
		{"a read error", io.MultiReader(strings.NewReader(start), iotest.ErrReader(errors.New("reset"))), nil},
		{"an event not a chunk", strings.NewReader(start + sse(`{"choices":[`, `[DONE]`)), nil},
		{"a call continued after text", strings.NewReader(start + sse(`{"choices":[{"index":0,"delta":{"content":"x"}}]}`,
			`{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"}"}}]}}]}`, `[DONE]`)), nil},
		{"an event too large", strings.NewReader(start + "data: " + strings.Repeat("x", 2*bridge.DefaultMaxEvent) + "\n\n" + sse(`[DONE]`)), bridge.ErrEventTooLarge},
	} {
		out, err, s := translate(t, tc.in, `{}`)
		if err == nil || tc.is != nil && !errors.Is(err, tc.is) {
			t.Errorf("%s: error %v, want %v", tc.name, err, tc.is)
		}
		if strings.Contains(string(out), "response.completed") || strings.Contains(string(out), "response.incomplete") || s.Assistant() != nil {
			t.Errorf("%s: a broken stream finished:\n%s", tc.name, out)
		}
		if evs := parseEvents(t, out); len(evs) < 4 {
			t.Errorf("%s: what arrived before the break was not relayed: %s", tc.name, types(evs))
		}
	}
	// The bound is the caller's to set.
	s := bridge.StreamReader(io.NopCloser(strings.NewReader(sse(`{"model":"`+strings.Repeat("m", 100)+`","choices":[]}`))), nil, "resp_1", 1, 64)
	if _, err := io.ReadAll(s); !errors.Is(err, bridge.ErrEventTooLarge) {
		t.Errorf("a 64-byte bound took a larger event: %v", err)
	}
}

// A finished stream whose [DONE] went missing is complete, as the relay
// counts it; an answer of nothing is one empty message.
func TestStreamWithoutDone(t *testing.T) {
	out, err, _ := translate(t, strings.NewReader(sse(`{"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":"stop"}]}`)), `{}`)
	if err != nil {
		t.Fatal(err)
	}
	evs := parseEvents(t, out)
	want := "response.created response.in_progress response.output_item.added response.content_part.added " +
		"response.output_text.done response.content_part.done response.output_item.done response.completed"
	if got := types(evs); got != want {
		t.Fatalf("events %s\nwant   %s", got, want)
	}
	if r := evs[len(evs)-1].ev.Response; r.OutputText() != "" || len(r.Output) != 1 || r.JSON.Usage.Valid() {
		t.Errorf("final %s", r.RawJSON())
	}
}

// An answer cut at its bound ends with response.incomplete, saying why.
func TestStreamIncomplete(t *testing.T) {
	out, err, s := translate(t, strings.NewReader(sse(`{"model":"m","choices":[{"index":0,"delta":{"content":"Once upon"}}]}`,
		`{"model":"m","choices":[{"index":0,"delta":{},"finish_reason":"length"}]}`,
		`{"model":"m","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":16,"total_tokens":19}}`, `[DONE]`)), `{"max_output_tokens":16}`)
	if err != nil {
		t.Fatal(err)
	}
	evs := parseEvents(t, out)
	last := evs[len(evs)-1].ev
	if last.Type != "response.incomplete" || last.Response.Status != "incomplete" || last.Response.IncompleteDetails.Reason != "max_output_tokens" ||
		last.Response.Usage.OutputTokens != 16 || last.Response.MaxOutputTokens != 16 || last.Response.Output[0].Status != "incomplete" {
		t.Errorf("last %s", evs[len(evs)-1].data)
	}
	if done := evs[len(evs)-2].ev; done.Type != "response.output_item.done" || done.Item.Status != "incomplete" {
		t.Errorf("item done %s", evs[len(evs)-2].data)
	}
	if string(s.Assistant()) != `[{"role":"assistant","content":"Once upon"}]` {
		t.Errorf("assistant %s", s.Assistant())
	}
}

// A refusal streams as a refusal part.
func TestStreamRefusal(t *testing.T) {
	out, err, _ := translate(t, strings.NewReader(sse(`{"model":"m","choices":[{"index":0,"delta":{"refusal":"I can"}}]}`,
		`{"model":"m","choices":[{"index":0,"delta":{"refusal":"'t."},"finish_reason":"stop"}]}`, `[DONE]`)), `{}`)
	if err != nil {
		t.Fatal(err)
	}
	evs := parseEvents(t, out)
	want := "response.created response.in_progress response.output_item.added response.content_part.added response.refusal.delta " +
		"response.refusal.done response.content_part.done response.output_item.done response.completed"
	if got := types(evs); got != want {
		t.Fatalf("events %s\nwant   %s", got, want)
	}
	if p := evs[len(evs)-3].ev.Part; p.Type != "refusal" || p.Refusal != "I can't." {
		t.Errorf("part %s", evs[len(evs)-3].data)
	}
}

// A chat error event becomes the Responses error event, and ends the
// stream: nothing after it is read.
func TestStreamError(t *testing.T) {
	for _, tc := range []struct{ name, in, code, param string }{
		{"first", sse(`{"error":{"message":"overloaded","type":"server_error","code":"overloaded","param":null}}`), "overloaded", ""},
		{"mid-stream", sse(`{"model":"m","choices":[{"index":0,"delta":{"content":"Hi"}}]}`,
			`{"error":{"message":"bad","type":"invalid_request_error","param":"messages"}}`,
			`{"model":"m","choices":[{"index":0,"delta":{"content":"more"},"finish_reason":"stop"}]}`, `[DONE]`), "invalid_request_error", "messages"},
	} {
		out, err, s := translate(t, strings.NewReader(tc.in), `{}`)
		if err != nil {
			t.Fatal(err)
		}
		evs := parseEvents(t, out)
		last := evs[len(evs)-1]
		if last.ev.Type != "error" || last.ev.Code != tc.code || last.ev.Param != tc.param || last.ev.Message == "" ||
			strings.Contains(string(out), "more") || s.Assistant() != nil {
			t.Errorf("%s: %s", tc.name, out)
		}
		if tc.param == "" && !strings.Contains(string(last.data), `"param":null`) {
			t.Errorf("%s: param %s", tc.name, last.data)
		}
	}
}
