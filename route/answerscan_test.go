package route

import (
	"encoding/json"
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
