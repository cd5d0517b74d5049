package emulator

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

func TestConfigValidate(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatalf("default: %v", err)
	}
	if err := (Config{}).Validate(); err != nil {
		t.Fatalf("zero: %v", err)
	}
	for _, tc := range []struct {
		field string
		edit  func(*Config)
	}{
		{"Latency", func(c *Config) { c.Latency = -time.Second }},
		{"TTFT", func(c *Config) { c.TTFT = -1 }},
		{"TPS", func(c *Config) { c.TPS = -1 }},
		{"TPS", func(c *Config) { c.TPS = math.Inf(1) }},
		{"ErrorRate", func(c *Config) { c.ErrorRate = 1.5 }},
		{"ErrorRate", func(c *Config) { c.ErrorRate = math.NaN() }},
		{"RPM", func(c *Config) { c.RPM = -1 }},
		{"DefaultMaxTokens", func(c *Config) { c.DefaultMaxTokens = -1 }},
		{"DefaultMaxTokens", func(c *Config) { c.DefaultMaxTokens = maxCompletionTokens + 1 }},
		{"Models", func(c *Config) { c.Models = map[string]Price{"": {}} }},
		{"Models", func(c *Config) { c.Models = map[string]Price{"m": {InputUSDPerMTok: -1}} }},
		{"EmbeddingDimensions", func(c *Config) { c.EmbeddingDimensions = map[string]int{"m": 0} }},
		{"EmbeddingDimensions", func(c *Config) { c.EmbeddingDimensions = map[string]int{"m": maxEmbeddingDimensions + 1} }},
		{"Deployments", func(c *Config) { c.Deployments = map[string]string{"a/b": "m"} }},
		{"Deployments", func(c *Config) { c.Deployments = map[string]string{"d": ""} }},
		{"Deployments", func(c *Config) {
			c.Models = map[string]Price{"m": {}}
			c.Deployments = map[string]string{"d": "other"}
		}},
	} {
		c := DefaultConfig()
		tc.edit(&c)
		err := c.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%s: error %v does not name the field", tc.field, err)
		}
		if _, err := New(c); err == nil {
			t.Errorf("%s: New accepted an invalid config", tc.field)
		}
	}
}

func TestConfigIsCopied(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Models = map[string]Price{"m": {}}
	e, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Models["other"] = Price{}
	got := e.Config()
	got.Models["third"] = Price{}
	if len(e.Config().Models) != 1 {
		t.Error("the emulator shares its Models map")
	}
	if (Config{}).normalized().DefaultMaxTokens != 16 {
		t.Error("DefaultMaxTokens 0 does not mean 16")
	}
}

func TestVocabulary(t *testing.T) {
	tok := testTokenizer
	seen := map[string]bool{}
	for _, w := range vocabulary {
		if seen[w] {
			t.Errorf("%q twice", w)
		}
		seen[w] = true
		if n := tok.Count(w); n != 1 {
			t.Errorf("%q is %d tokens", w, n)
		}
		if w[0] != ' ' || strings.TrimLeft(w[1:], "abcdefghijklmnopqrstuvwxyz") != "" {
			t.Errorf("%q is not a space and lower-case letters", w)
		}
	}
	// Joined, the words stay one token each.
	for _, n := range []int{1, 2, 17, 500} {
		text := string(appendWords(nil, 12345, 0, n))
		if got := tok.Count(text); got != n {
			t.Errorf("%d words are %d tokens", n, got)
		}
	}
}

func TestAppendString(t *testing.T) {
	for _, s := range []string{"", "plain", `q"b\s`, "nl\n\r\t", "\x00\x1f\x7f", "é漢😀", "bad\xffutf8\xc3", "\u2028"} {
		checkAppendString(t, s)
	}
}

func FuzzAppendString(f *testing.F) {
	for _, s := range []string{"", `"\`, "\x00é\xff"} {
		f.Add(s)
	}
	f.Fuzz(checkAppendString)
}

// checkAppendString: the output is JSON that decodes as encoding/json's
// encoding of s does.
func checkAppendString(t *testing.T, s string) {
	out := appendString(nil, s)
	var got string
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("appendString(%q) = %s: %v", s, out, err)
	}
	ref, _ := json.Marshal(s)
	var want string
	_ = json.Unmarshal(ref, &want)
	if got != want {
		t.Errorf("appendString(%q) decodes to %q, want %q", s, got, want)
	}
	if utf8.ValidString(s) && got != s {
		t.Errorf("appendString(%q) decodes to %q", s, got)
	}
}

func TestErrorShape(t *testing.T) {
	b := (&apiError{status: 400, message: "m\"", typ: "invalid_request_error", param: "messages[0]"}).appendJSON(nil)
	want := `{"error":{"message":"m\"","type":"invalid_request_error","param":"messages[0]","code":null}}`
	if string(b) != want {
		t.Errorf("got %s\nwant %s", b, want)
	}
}
