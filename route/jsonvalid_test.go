package route

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
)

var validJSONCases = []string{
	``, ` `, `{}`, `[]`, `""`, `0`, `-0`, `1.5e3`, `-1.5E-3`, `1e+9`, `01`, `1.`, `.5`, `-`, `1e`, `+1`, `--1`,
	`true`, `false`, `null`, `tru`, `nul`, `truex`, `[true,false,null]`, `[1,]`, `[,1]`, `{"a":1,}`, `{"a"}`,
	`{"a":}`, `{"a" : 1 , "b" : [ 1 , { } ] }`, `{1:2}`, `{"a":1}}`, `[[]`, `[]]`, `"\u00e9\n\t\"\\\/"`,
	`"\u00g0"`, `"\x"`, `"a` + "\x01" + `"`, "\"\xff\xfe\"", `"\ud800"`, "  [1]\n", "[1] 2", `{"a":[{"b":{"c":[null]}}]}`,
	`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}`, `"\u12`, `"abc`, `[1` + "\x00" + `]`,
	strings.Repeat("[", 10000) + strings.Repeat("]", 10000), strings.Repeat("[", 10001) + strings.Repeat("]", 10001),
	strings.Repeat(`{"a":`, 200) + "1" + strings.Repeat("}", 200),
}

func TestValidJSONMatchesEncodingJSON(t *testing.T) {
	for _, in := range validJSONCases {
		if got, want := validJSON([]byte(in)), json.Valid([]byte(in)); got != want {
			t.Errorf("%.60q: %v, encoding/json says %v", in, got, want)
		}
	}
}

func FuzzValidJSON(f *testing.F) {
	for _, in := range validJSONCases {
		f.Add([]byte(in))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if got, want := validJSON(b), json.Valid(b); got != want {
			t.Fatalf("%q: %v, encoding/json says %v", b, got, want)
		}
	})
}

func BenchmarkValidJSON(b *testing.B) {
	emb, err := os.ReadFile("testdata/embedding.json")
	if err != nil {
		b.Fatal(err)
	}
	prompt := []byte(`{"model":"gpt-4o-mini","messages":[{"role":"user","content":"` + strings.Repeat("hello world, ", 4000) + `"}]}`)
	for _, in := range []struct {
		name string
		b    []byte
	}{{"embedding", emb}, {"prompt", prompt}} {
		b.Run(in.name+"/encoding-json", func(b *testing.B) {
			b.SetBytes(int64(len(in.b)))
			for b.Loop() {
				json.Valid(in.b)
			}
		})
		b.Run(in.name+"/validJSON", func(b *testing.B) {
			b.SetBytes(int64(len(in.b)))
			for b.Loop() {
				validJSON(in.b)
			}
		})
	}
}
