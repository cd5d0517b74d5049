package route

import (
	"slices"
	"testing"
)

// EncodeMessages gives as many ids as CountMessages counts, and a
// conversation's next turn starts with this turn's ids followed by the
// answer's: what prefix caching by token ids relies on.
func TestEncodeMessages(t *testing.T) {
	var tok Tokenizer
	bodies := []string{
		`{"model":"m","messages":[{"role":"user","content":"hi"}]}`,
		`{"model":"m","messages":[{"role":"system","content":"You are terse."},{"role":"user","name":"ann","content":"Why is the sky blue?"}]}`,
		`{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"what is this"},{"type":"image_url","image_url":{"url":"https://x/y.png"}}]}]}`,
		`{"model":"m","messages":[{"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}}]},{"role":"tool","tool_call_id":"c","content":"42"}]}`,
	}
	for _, b := range bodies {
		r, err := ParseChatRequest([]byte(b))
		if err != nil {
			t.Fatal(err)
		}
		if ids, n := tok.EncodeMessages(r.Messages, nil), tok.CountMessages(r.Messages); len(ids) != n {
			t.Errorf("%s: %d ids, CountMessages %d", b, len(ids), n)
		}
	}
	if got := tok.Encode("hello world"); len(got) != tok.Count("hello world") || len(got) == 0 {
		t.Errorf("Encode gave %v", got)
	}

	first := []Message{{Role: "system", Content: Content{Set: true, Text: "Be brief."}}, {Role: "user", Content: Content{Set: true, Text: "Name a river."}}}
	answer := " the river"
	next := append(slices.Clone(first), Message{Role: "assistant", Content: Content{Set: true, Text: answer}},
		Message{Role: "user", Content: Content{Set: true, Text: "Another?"}})
	turn := append(tok.EncodeMessages(first, nil), tok.Encode(answer)...)
	if got := tok.EncodeMessages(next, nil); !slices.Equal(got[:len(turn)], turn) {
		t.Errorf("the next turn does not start with this turn and its answer:\n%v\n%v", got[:len(turn)], turn)
	}
}
