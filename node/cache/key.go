package cache

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"hash"
	"strconv"
	"strings"
)

// Scope is what a request's answer may be shared within: never across
// tenants, residencies or endpoints.
type Scope struct {
	Tenant string
	// Residency is the request's effective residency, after narrowing
	// ("" for none), and Strict its strict transit.
	Residency string
	Strict    bool
	// Endpoint is the API's name (chat, embeddings, completions,
	// responses, messages) and Model the model or group asked for.
	Endpoint, Model string
}

// Request is what the cache reads of a request body.
type Request struct {
	// Key is the request's key: its scope and canonical body.
	Key Key
	// Reusable means its parameters make its answer reusable: an
	// embeddings request, or a generation at temperature 0 with one
	// choice and no tools.
	Reusable bool
	// Why says why it is not Reusable ("" when it is).
	Why string
	// Stateful means it must never be answered from the cache, even when
	// asked: a Responses request that stores its response (store is not
	// false), continues one (previous_response_id) or takes part in a
	// conversation (conversation), whose items change with every turn
	// and which a turn adds to; a chat completion the provider is to
	// store (store: true).
	Stateful bool
}

// ignored are the body's top-level members that do not change the
// answer, left out of the key: who the end user is (user,
// safety_identifier), what the client tags it with (metadata) and its
// routing hint (prompt_cache_key).
var ignored = [...]string{"user", "safety_identifier", "metadata", "prompt_cache_key"}

// errNotObject is a body that is not a JSON object; the node has parsed
// every body it asks about already, so it does not happen there.
var errNotObject = errors.New("cache: the request body is not a JSON object")

// Inspect reads body, a request within scope, for the cache: its key and
// whether its answer may be reused. The key hashes the scope and the
// body in a canonical form: members in sorted order at every level, no
// insignificant whitespace, numbers written one way (0.0 as 0), the
// ignored members left out.
func Inspect(scope Scope, body []byte) (Request, error) {
	d := json.NewDecoder(bytes.NewReader(body))
	d.UseNumber()
	var doc map[string]any
	if err := d.Decode(&doc); err != nil || doc == nil {
		return Request{}, errNotObject
	}
	r := Request{Key: keyOf(scope, doc)}
	r.Why = reuse(scope.Endpoint, doc)
	r.Reusable = r.Why == ""
	store, stored := doc["store"].(bool)
	switch scope.Endpoint {
	case "responses":
		prev, _ := doc["previous_response_id"].(string)
		r.Stateful = !stored || store || prev != "" || doc["conversation"] != nil
	case "chat":
		r.Stateful = store
	}
	return r, nil
}

// reuse says why a request's answer is not reusable, or "" when it is:
// an embedding is a function of its input; a generation only at
// temperature 0, with one choice, and without tools (an agent acts on a
// tool call, and a replayed one would carry the first call's ids).
func reuse(endpoint string, doc map[string]any) string {
	if endpoint == "embeddings" {
		return ""
	}
	t, ok := doc["temperature"].(json.Number)
	if f, err := t.Float64(); !ok || err != nil || f != 0 {
		return "temperature is not 0"
	}
	if n, ok := doc["n"].(json.Number); ok && n.String() != "1" {
		return "more than one choice"
	}
	if b, ok := doc["best_of"].(json.Number); ok && b.String() != "1" {
		return "more than one choice"
	}
	for _, k := range []string{"tools", "functions"} {
		if ts, ok := doc[k].([]any); ok && len(ts) > 0 {
			return "tools"
		}
	}
	return ""
}

// keyOf hashes scope and doc, its ignored members left out.
func keyOf(scope Scope, doc map[string]any) Key {
	for _, k := range ignored {
		delete(doc, k)
	}
	h := sha256.New()
	for _, s := range []string{scope.Tenant, scope.Residency, strconv.FormatBool(scope.Strict), scope.Endpoint, scope.Model} {
		writeString(h, s)
	}
	canonical(h, doc)
	var k Key
	h.Sum(k[:0])
	return k
}

// writeString writes s with its length first, so that no two scopes
// hash alike.
func writeString(h hash.Hash, s string) {
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(len(s)))
	h.Write(n[:])
	h.Write([]byte(s))
}

// canonical writes v to h as compact JSON: objects' members sorted (as
// encoding/json writes maps), numbers normalized.
func canonical(h hash.Hash, v any) {
	normalize(v)
	e := json.NewEncoder(h)
	e.SetEscapeHTML(false)
	_ = e.Encode(v) // a tree decoded from JSON always encodes
}

// normalize rewrites, in place, every number of v written with a
// fraction or an exponent in the shortest form that reads back the same
// (0.0 and 0e0 as 0, 1.50 as 1.5); integers stay as written.
func normalize(v any) {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			if n, ok := x.(json.Number); ok {
				v[k] = normalNumber(n)
			} else {
				normalize(x)
			}
		}
	case []any:
		for i, x := range v {
			if n, ok := x.(json.Number); ok {
				v[i] = normalNumber(n)
			} else {
				normalize(x)
			}
		}
	}
}

func normalNumber(n json.Number) json.Number {
	s := n.String()
	if !strings.ContainsAny(s, ".eE") {
		return n
	}
	f, err := n.Float64()
	if err != nil {
		return n
	}
	return json.Number(strconv.FormatFloat(f, 'g', -1, 64))
}
