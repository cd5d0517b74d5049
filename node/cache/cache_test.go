package cache

import (
	"bytes"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func key(s string) Key {
	k, err := Inspect(Scope{Tenant: "t", Endpoint: "chat", Model: "m"}, []byte(`{"model":"m","temperature":0,"messages":[{"role":"user","content":"`+s+`"}]}`))
	if err != nil {
		panic(err)
	}
	return k.Key
}

func body(n int) *Entry { return &Entry{Body: bytes.Repeat([]byte("x"), n), Header: http.Header{}} }

// An entry is served until its TTL runs out, then dropped.
func TestCacheTTL(t *testing.T) {
	c := New(Config{TTL: time.Minute, MaxBytes: 1 << 20})
	now := time.Unix(1e9, 0)
	if !c.Put(key("a"), body(100), now) {
		t.Fatal("not stored")
	}
	if _, ok := c.Get(key("a"), now.Add(59*time.Second)); !ok {
		t.Fatal("a miss within the TTL")
	}
	if _, ok := c.Get(key("b"), now); ok {
		t.Fatal("a hit for another key")
	}
	if _, ok := c.Get(key("a"), now.Add(time.Minute)); ok {
		t.Fatal("a hit at the TTL")
	}
	if c.Len() != 0 || c.Bytes() != 0 {
		t.Fatalf("an expired entry kept: %d entries, %d bytes", c.Len(), c.Bytes())
	}
}

// Entries are bounded by MaxBytes, the least recently used out; an entry
// over a sixteenth of it is not stored; a key stored again is replaced.
func TestCacheBytes(t *testing.T) {
	c := New(Config{TTL: time.Hour, MaxBytes: 16 << 10})
	now := time.Unix(1e9, 0)
	each := int64(1<<10 - entryOverhead) // 1 KiB counted with the overhead
	for i := range 16 {
		if !c.Put(key(string(rune('a'+i))), body(int(each)), now) {
			t.Fatalf("entry %d not stored", i)
		}
	}
	if c.Bytes() != 16<<10 || c.Len() != 16 {
		t.Fatalf("%d bytes in %d entries", c.Bytes(), c.Len())
	}
	c.Get(key("a"), now) // a is now the most recently used, b the least
	c.Put(key("q"), body(int(each)), now)
	if _, ok := c.Get(key("b"), now); ok {
		t.Fatal("b, the least recently used, was kept")
	}
	if _, ok := c.Get(key("a"), now); !ok {
		t.Fatal("a, used since, was evicted")
	}
	if c.Bytes() > 16<<10 {
		t.Fatalf("%d bytes held, over the bound", c.Bytes())
	}
	if c.Put(key("big"), body(int(c.MaxEntry())), now) {
		t.Fatal("an entry over MaxEntry stored")
	}
	before := c.Bytes()
	c.Put(key("a"), body(int(each)/2), now)
	if c.Bytes() != before-each+each/2 {
		t.Fatalf("replacing a: %d bytes, want %d", c.Bytes(), before-each+each/2)
	}
}

func TestKeys(t *testing.T) {
	scope := Scope{Tenant: "acme", Residency: "eu", Endpoint: "chat", Model: "gpt-4o-mini"}
	base := `{"model":"gpt-4o-mini","temperature":0,"messages":[{"role":"user","content":"hi"}],"max_tokens":5}`
	inspect := func(s Scope, b string) Request {
		t.Helper()
		r, err := Inspect(s, []byte(b))
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	want := inspect(scope, base)
	if !want.Reusable || want.Stateful {
		t.Fatalf("base: %+v", want)
	}
	// The same request, written otherwise or with members that do not
	// change the answer: the same key.
	for _, same := range []string{
		`{ "max_tokens" : 5, "messages":[{"content":"hi","role":"user"}], "temperature":0.0, "model":"gpt-4o-mini" }`,
		`{"model":"gpt-4o-mini","temperature":0e0,"messages":[{"role":"user","content":"hi"}],"max_tokens":5,"user":"u-42","metadata":{"team":"a"},"prompt_cache_key":"k","safety_identifier":"s"}`,
	} {
		if got := inspect(scope, same); got.Key != want.Key {
			t.Errorf("%s: another key", same)
		}
	}
	// Anything else that differs: another key.
	for _, other := range []struct {
		scope Scope
		body  string
	}{
		{Scope{Tenant: "globex", Residency: "eu", Endpoint: "chat", Model: "gpt-4o-mini"}, base},
		{Scope{Tenant: "acme", Residency: "", Endpoint: "chat", Model: "gpt-4o-mini"}, base},
		{Scope{Tenant: "acme", Residency: "eu", Strict: true, Endpoint: "chat", Model: "gpt-4o-mini"}, base},
		{Scope{Tenant: "acme", Residency: "eu", Endpoint: "messages", Model: "gpt-4o-mini"}, base},
		{scope, strings.Replace(base, `"hi"`, `"hi!"`, 1)},
		{scope, strings.Replace(base, `"max_tokens":5`, `"max_tokens":6`, 1)},
		{scope, strings.Replace(base, `}`, `,"stream":true}`, 1)},
		{Scope{Tenant: "acmeeu", Endpoint: "chat", Model: "gpt-4o-mini"}, base}, // no ambiguity between fields
	} {
		if got := inspect(other.scope, other.body); got.Key == want.Key {
			t.Errorf("%+v %s: the same key", other.scope, other.body)
		}
	}
	for _, c := range []struct {
		endpoint, body string
		reusable       bool
		stateful       bool
	}{
		{"chat", `{"model":"m","messages":[]}`, false, false},
		{"chat", `{"model":"m","temperature":0.7,"messages":[]}`, false, false},
		{"chat", `{"model":"m","temperature":0,"n":2,"messages":[]}`, false, false},
		{"chat", `{"model":"m","temperature":0,"n":1,"messages":[]}`, true, false},
		{"chat", `{"model":"m","temperature":0,"tools":[{"type":"function","function":{"name":"f"}}],"messages":[]}`, false, false},
		{"chat", `{"model":"m","temperature":0,"tools":[],"messages":[]}`, true, false},
		{"completions", `{"model":"m","temperature":0,"best_of":3,"prompt":"x"}`, false, false},
		{"embeddings", `{"model":"e","input":"x"}`, true, false},
		{"responses", `{"model":"m","temperature":0,"input":"x"}`, true, true},
		{"responses", `{"model":"m","temperature":0,"input":"x","store":false}`, true, false},
		{"responses", `{"model":"m","temperature":0,"input":"x","store":false,"previous_response_id":"resp_1"}`, true, true},
		// A conversation's items change with every turn, and a turn
		// adds to it: a replay would answer from a stale conversation and
		// leave the turn out of it.
		{"responses", `{"model":"m","temperature":0,"input":"x","store":false,"conversation":"conv_1"}`, true, true},
		{"responses", `{"model":"m","temperature":0,"input":"x","store":false,"conversation":{"id":"conv_1"}}`, true, true},
		{"responses", `{"model":"m","temperature":0,"input":"x","store":false,"conversation":null}`, true, false},
		// A chat completion stored at the provider (for its evals or
		// distillation) is stored only by a call.
		{"chat", `{"model":"m","temperature":0,"store":true,"messages":[]}`, true, true},
		{"chat", `{"model":"m","temperature":0,"store":false,"messages":[]}`, true, false},
	} {
		got := inspect(Scope{Endpoint: c.endpoint}, c.body)
		if got.Reusable != c.reusable || got.Stateful != c.stateful || got.Reusable != (got.Why == "") {
			t.Errorf("%s %s: %+v", c.endpoint, c.body, got)
		}
	}
	if _, err := Inspect(scope, []byte(`[1]`)); err == nil {
		t.Error("an array inspected")
	}
}
