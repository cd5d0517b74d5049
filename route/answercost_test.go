package route

import (
	"encoding/json"
	"strings"
	"testing"
)

// A cost is decimal dollars rounded to the nano-dollar, without trailing
// zeros: what X-LLMesh-Cost and usage.cost say, and what the ledger
// counts (consensus.RoundNanos rounds alike).
func TestAppendCost(t *testing.T) {
	for _, tc := range []struct {
		usd  float64
		want string
	}{
		{0, "0"}, {-1, "0"}, {1, "1"}, {1.5, "1.5"}, {0.000123, "0.000123"}, {0.000000001, "0.000000001"},
		{0.0000000004, "0"}, {0.0000000006, "0.000000001"}, {12.3456789012, "12.345678901"}, {0.1 + 0.2, "0.3"},
	} {
		if got := FormatCost(tc.usd); got != tc.want {
			t.Errorf("FormatCost(%g) = %q, want %q", tc.usd, got, tc.want)
		}
	}
	if got := string(AppendCostComment([]byte("x"), 0.25)); got != "x: X-LLMesh-Cost: 0.25\n\n" {
		t.Errorf("comment %q", got)
	}
	if !IsCostComment([]byte(": X-LLMesh-Cost: 0")) || IsCostComment([]byte(": keep-alive")) {
		t.Error("IsCostComment")
	}
}

// The model is renamed and usage.cost set in one pass, every other byte
// kept; a cost already there (an upstream that reports its own) is
// replaced; an answer without usage gets none.
func TestWithModelCost(t *testing.T) {
	for _, tc := range []struct{ in, model, want string }{
		{`{"model":"up","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2}}`, "m",
			`{"model":"m","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2,"cost":0.0125}}`},
		{`{"usage":{"prompt_tokens":3} ,"model":"up"}`, "m", `{"usage":{"prompt_tokens":3,"cost":0.0125} ,"model":"m"}`},
		{`{"model":"m","usage":{ }}`, "m", `{"model":"m","usage":{ "cost":0.0125}}`},
		{`{"model":"m","usage":{"cost":9.5,"total_tokens":1}}`, "m", `{"model":"m","usage":{"cost":0.0125,"total_tokens":1}}`},
		{`{"model":"up","usage":null}`, "m", `{"model":"m","usage":null}`},
		{`{"model":"up","choices":[{"usage":{}}]}`, "", ``},
		{`{"object":"list","data":[],"usage":{"prompt_tokens":8,"total_tokens":8}}`, "",
			`{"object":"list","data":[],"usage":{"prompt_tokens":8,"total_tokens":8,"cost":0.0125}}`},
	} {
		got, ok := withModelCost(nil, []byte(tc.in), tc.model, 0.0125, true)
		if (tc.want == "") != !ok || ok && string(got) != tc.want {
			t.Errorf("withModelCost(%s)\n = %s %v\nwant %s", tc.in, got, ok, tc.want)
		}
		if ok && !json.Valid(got) {
			t.Errorf("not JSON: %s", got)
		}
	}
	// A cache hit's answer is re-marked as free.
	got, ok := WithUsageCost(nil, []byte(`{"usage":{"prompt_tokens":1,"cost":0.5}}`), 0)
	if !ok || string(got) != `{"usage":{"prompt_tokens":1,"cost":0}}` {
		t.Fatalf("WithUsageCost: %s %v", got, ok)
	}
	// Into a buffer large enough, nothing is allocated.
	data := []byte(`{"id":"x","model":"meta-llama/Meta-Llama-3-8B-Instruct","choices":[],"usage":{"prompt_tokens":3}}`)
	buf := make([]byte, 0, 512)
	if n := testing.AllocsPerRun(100, func() { buf, _ = withModelCost(buf, data, "llama-3-8b", 0.5, true) }); n != 0 {
		t.Fatalf("%v allocations", n)
	}
}

// Tags come from the header and metadata.tags, in one canonical set;
// too many, or malformed, is a 400 naming where they came from.
func TestParseTags(t *testing.T) {
	chat := func(body string) *ChatRequest {
		r, err := ParseChatRequest([]byte(body))
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	const msgs = `"messages":[{"role":"user","content":"hi"}]`
	for _, tc := range []struct {
		header, body, want, param string
	}{
		{"", `{"model":"m",` + msgs + `}`, "", ""},
		{" team:a , app=b ", `{"model":"m",` + msgs + `}`, "app=b,team:a", ""},
		{"b,a,b", `{"model":"m",` + msgs + `,"metadata":{"tags":"c,a","other":"x"}}`, "a,b,c", ""},
		{"", `{"model":"m",` + msgs + `,"metadata":{"tags":null}}`, "", ""},
		{"", `{"model":"m",` + msgs + `,"metadata":{"user":"u"}}`, "", ""},
		{"a,,b", `{"model":"m",` + msgs + `}`, "", HeaderTags},
		{"a b", `{"model":"m",` + msgs + `}`, "", HeaderTags},
		{strings.Repeat("x", MaxTagBytes+1), `{"model":"m",` + msgs + `}`, "", HeaderTags},
		{"1,2,3,4,5", `{"model":"m",` + msgs + `,"metadata":{"tags":"6,7,8,9"}}`, "", HeaderTags},
		{"", `{"model":"m",` + msgs + `,"metadata":{"tags":["a"]}}`, "", "metadata.tags"},
		{"", `{"model":"m",` + msgs + `,"metadata":{"tags":"ok,bad\"tag"}}`, "", "metadata.tags"},
	} {
		got, err := ParseTags(tc.header, chat(tc.body))
		var ie *InvalidRequestError
		switch {
		case tc.param == "" && (err != nil || got != tc.want):
			t.Errorf("ParseTags(%q, %s) = %q, %v; want %q", tc.header, tc.body, got, err, tc.want)
		case tc.param != "" && (!asInvalid(err, &ie) || ie.Param != tc.param):
			t.Errorf("ParseTags(%q, %s): %v; want an error naming %s", tc.header, tc.body, err, tc.param)
		}
	}
	// The canonical set parses to itself: a forward carries it so.
	if got, err := ParseTags("a,b:c", nil); err != nil || got != "a,b:c" {
		t.Fatalf("%q %v", got, err)
	}
}

func asInvalid(err error, ie **InvalidRequestError) bool {
	e, ok := err.(*InvalidRequestError)
	*ie = e
	return ok
}
