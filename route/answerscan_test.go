package route

import (
	"encoding/json"
	"os"
	"testing"
)

// The scanned readers agree with encoding/json on every usage and answer
// shape, the unusual ones (falling back to it) included.
func TestScannedUsageMatchesDecoded(t *testing.T) {
	for _, in := range []string{
		`{"prompt_tokens":12,"completion_tokens":34,"total_tokens":46}`,
		`{"prompt_tokens":12,"completion_tokens":34,"prompt_tokens_details":{"cached_tokens":8,"audio_tokens":0}}`,
		`{"input_tokens":5,"output_tokens":7,"input_tokens_details":{"cached_tokens":3},"output_tokens_details":{"reasoning_tokens":1}}`,
		`{ "prompt_tokens" : 1 , "completion_tokens" : 2 , "prompt_tokens_details" : null }`,
		`{"prompt_tokens":-3,"completion_tokens":0}`,
		`{"prompt_tokens":1e3,"completion_tokens":2}`,     // not a plain integer: encoding/json's
		`{"prompt_tokens":null,"completion_tokens":2}`,    // null: encoding/json's
		`{"prompt_tokens":"12","completion_tokens":2}`,    // a string: refused
		`{"prompt_tokens_details":[1],"prompt_tokens":1}`, // refused
		`{"prompt_tokens":1,"prompt_tokens":2}`,           // the last counts
		`{"prompt_tokens":12,"completion_tokens":34`,      // cut
		`{}`,
		`{"prompt_tokens":5,"Completion_tokens":1}`,                       // encoding/json ignores case
		`{"prompt_tokens_details":{"Cached_Tokens":3},"prompt_tokens":4}`, // here too
	} {
		var want Usage
		werr := json.Unmarshal([]byte(in), &want)
		got, err := decodeUsage([]byte(in))
		if (err == nil) != (werr == nil) || (werr == nil && got != want) {
			t.Errorf("%s: got %+v, %v; encoding/json %+v, %v", in, got, err, want, werr)
		}
	}
}

func TestScanAnswer(t *testing.T) {
	for _, tc := range []struct {
		in                     string
		ok, choices, data, use bool
		object                 string
	}{
		{`{"id":"x","object":"chat.completion","choices":[{"index":0}],"usage":{"prompt_tokens":1}}`, true, true, false, true, `"chat.completion"`},
		{`{"object":"list","data":[{"embedding":[0.1]}],"usage":null}`, true, false, true, false, `"list"`},
		{`{"choices":[],"usage":{}}`, true, false, false, true, ""},
		{`{"choices": [ ] }`, true, false, false, false, ""},
		{`{"choices":null}`, true, false, false, false, ""},
		{`{"choices":{}}`, false, false, false, false, ""},
		{`{"usage":"many"}`, false, false, false, false, ""},
		{`{"object":1}`, false, false, false, false, ""},
		{`[{"choices":[1]}]`, false, false, false, false, ""},
		{`{"choices":[1]`, false, false, false, false, ""},
		{``, false, false, false, false, ""},
	} {
		d, ok := scanAnswer([]byte(tc.in))
		if ok != tc.ok || ok && (d.choices != tc.choices || d.data != tc.data || (d.usage != nil) != tc.use || string(d.object) != tc.object) {
			t.Errorf("%s: got %+v, %v", tc.in, d, ok)
		}
	}
}

func BenchmarkDecodeUsage(b *testing.B) {
	in := []byte(`{"prompt_tokens":1024,"completion_tokens":128,"total_tokens":1152,"prompt_tokens_details":{"cached_tokens":512,"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":0}}`)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := decodeUsage(in); err != nil {
			b.Fatal(err)
		}
	}
}

// What reading a whole answer costs per pass, on an embedding (19 KB of
// numbers, the largest whole answers the node reads): validation,
// scanning its members, and the model's and cost's rewrite.
func BenchmarkWholeEmbedding(b *testing.B) {
	in, err := os.ReadFile("testdata/embedding.json")
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(in)))
	b.Run("valid", func(b *testing.B) {
		for b.Loop() {
			json.Valid(in)
		}
	})
	b.Run("scan", func(b *testing.B) {
		for b.Loop() {
			if _, ok := scanAnswer(in); !ok {
				b.Fatal("not an answer")
			}
		}
	})
	buf := make([]byte, 0, len(in)+128)
	b.Run("rewrite", func(b *testing.B) {
		for b.Loop() {
			withModelCost(buf[:0], in, "text-embedding-3-small", 0.0000004, true)
		}
	})
	doc, _ := scanAnswer(in)
	b.Run("rewrite-scanned", func(b *testing.B) {
		for b.Loop() {
			withModelCostIn(buf[:0], in, &doc, "text-embedding-3-small", 0.0000004, true)
		}
	})
}

// An answer's rewrite from scanAnswer's members equals the one that
// looks for them.
func TestRewriteFromScannedMembers(t *testing.T) {
	emb, err := os.ReadFile("testdata/embedding.json")
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range []string{
		string(emb),
		`{"id":"c","object":"chat.completion","model":"gpt-4o-mini-2024","choices":[{"index":0}],"usage":{"prompt_tokens":1,"completion_tokens":2}}`,
		`{"model":"m","usage":{}}`,
		`{"usage":{"prompt_tokens":1,"cost":0.5},"model":"other"}`,
		`{"model":7,"usage":{"prompt_tokens":1}}`,
		`{"choices":[1]}`,
		`{"model":"m"}`,
	} {
		b := []byte(in)
		doc, ok := scanAnswer(b)
		if !ok {
			t.Fatalf("not an answer: %.80s", in)
		}
		for _, name := range []string{"", "m", "gpt-4o-mini"} {
			want, wok := withModelCost(nil, b, name, 0.000012, true)
			got, gok := withModelCostIn(nil, b, &doc, name, 0.000012, true)
			if gok != wok || string(got) != string(want) {
				t.Errorf("%.80s as %q: %v %.120s; want %v %.120s", in, name, gok, got, wok, want)
			}
			// A doc of another copy of the answer: its members are looked
			// for again.
			got, gok = withModelCostIn(nil, []byte(in), &doc, name, 0.000012, true)
			if gok != wok || string(got) != string(want) {
				t.Errorf("%.80s as %q: %v %.120s; want %v %.120s", in, name, gok, got, wok, want)
			}
		}
	}
}

// scanAnswerTwoPass is scanAnswer as it was before it validated member by
// member: the whole document first, then a walk over its members (each
// read by the same answerDoc.member). The fuzz test holds the one pass to
// it.
func scanAnswerTwoPass(b []byte) (answerDoc, bool) {
	var d answerDoc
	if !validJSON(b) || b[skipSpace(b, 0)] != '{' {
		return d, false
	}
	ok := true
	_ = eachMember(b, func(key string, v []byte) error {
		ok = d.member(key, v, ok)
		return nil
	})
	return d, ok
}

// scanAnswer's one pass reads every document as the two passes did.
func FuzzScanAnswer(f *testing.F) {
	for _, s := range []string{
		`{"id":"x","object":"chat.completion","model":"m","choices":[{"index":0}],"usage":{"prompt_tokens":1}}`,
		`{"object":"list","data":[{"embedding":[0.1,-2e-3,3]}],"usage":null}`,
		` { "choices" : [ ] , "usage" : { } } `, `{"choices":{}}`, `{"choices":[1]`, `{}`, `{} x`, `[]`, ``,
		`{"\u0075sage":{"prompt_tokens":2},"model":null}`, `{"a":1,}`, `{"a" 1}`, `{"a":[1,{"b":"\x01"}]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got, gotOK := scanAnswer(b)
		want, wantOK := scanAnswerTwoPass(b)
		if gotOK != wantOK || gotOK && (got.choices != want.choices || got.data != want.data || string(got.usage) != string(want.usage) ||
			string(got.id) != string(want.id) || string(got.object) != string(want.object) || string(got.model) != string(want.model)) {
			t.Fatalf("%q: one pass %+v, %v; two passes %+v, %v", b, got, gotOK, want, wantOK)
		}
	})
}
