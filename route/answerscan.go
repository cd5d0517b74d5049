package route

import (
	"encoding/json"
	"strings"
)

// Reading what the node needs from a provider's answer — whether it is
// one, its usage, its id — by scanning it in place, without
// encoding/json's reflection and the allocations that come with it: every
// whole answer and every stream's usage pass through here.

// answerDoc is what whole reads of an answer.
type answerDoc struct {
	choices, data bool   // a non-empty choices (data) array
	usage         []byte // the usage object; nil when absent or null
	id, object    []byte // JSON strings; nil when absent or null
	model         []byte // the model member's value, of any type; nil when absent
}

// scanAnswer reads b, a whole answer; false when it is not a JSON object
// or one of its members has the wrong type (as decoding it would fail).
func scanAnswer(b []byte) (answerDoc, bool) {
	var d answerDoc
	ok := true
	// One pass: each member's value is validated as it is passed over.
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return d, false
	}
	if i = skipSpace(b, i+1); i < len(b) && b[i] == '}' {
		return d, skipSpace(b, i+1) == len(b)
	}
	for {
		vstart := validMember(b, i)
		if vstart < 0 {
			return d, false
		}
		key, err := unquoteKey(b[i:skipString(b, i)])
		if err != nil { // the members after it are not read, as before
			return d, ok && validJSON(b)
		}
		vend := validValue(b, vstart, maxJSONDepth-1)
		if vend < 0 {
			return d, false
		}
		ok = d.member(key, b[vstart:vend], ok)
		switch i = skipSpace(b, vend); {
		case i < len(b) && b[i] == ',':
			i = skipSpace(b, i+1)
		case i < len(b) && b[i] == '}':
			return d, ok && skipSpace(b, i+1) == len(b)
		default:
			return d, false
		}
	}
}

// member reads the member key, whose value is v, into d if it is one
// whole reads; ok becomes false when its value has the wrong type.
func (d *answerDoc) member(key string, v []byte, ok bool) bool {
	switch key {
	case "choices":
		d.choices, ok = nonEmptyArray(v, ok)
	case "data":
		d.data, ok = nonEmptyArray(v, ok)
	case "usage":
		d.usage, ok = kindOf(v, '{', ok)
	case "id":
		d.id, ok = kindOf(v, '"', ok)
	case "object":
		d.object, ok = kindOf(v, '"', ok)
	case "model":
		d.model = v
	}
	return ok
}

// nonEmptyArray reports whether v is an array with an element; ok becomes
// false when v is neither an array nor null.
func nonEmptyArray(v []byte, ok bool) (bool, bool) {
	switch v[0] {
	case 'n':
		return false, ok
	case '[':
		return v[skipSpace(v, 1)] != ']', ok
	}
	return false, false
}

// kindOf returns v when it starts with open, nil for null; ok becomes
// false for anything else.
func kindOf(v []byte, open byte, ok bool) ([]byte, bool) {
	switch v[0] {
	case open:
		return v, ok
	case 'n':
		return nil, ok
	}
	return nil, false
}

// decodeUsage reads a usage object as Usage.UnmarshalJSON does.
func decodeUsage(b []byte) (Usage, error) {
	if u, ok := scanUsage(b); ok {
		return u, nil
	}
	var u Usage
	err := json.Unmarshal(b, &u)
	return u, err
}

// scanUsage reads the usual usage object, whose counts are plain
// integers, in place; false for anything else (Usage.UnmarshalJSON's
// work then).
func scanUsage(b []byte) (Usage, bool) {
	if len(b) == 0 || b[0] != '{' || !validJSON(b) {
		return Usage{}, false
	}
	// Each member as encoding/json reads it: the last of a name given
	// twice counts.
	var prompt, input, completion, output, promptCached, inputCached int
	ok := true
	count := func(v []byte) int {
		n, good := plainInt(v)
		ok = ok && good
		return n
	}
	cached := func(v []byte) (n int) {
		switch v[0] {
		case 'n':
			return 0
		case '{':
		default:
			ok = false
			return 0
		}
		_ = eachMember(v, func(key string, v []byte) error {
			if key == "cached_tokens" {
				n = count(v)
			} else if strings.EqualFold(key, "cached_tokens") {
				ok = false // encoding/json's case-insensitive match
			}
			return nil
		})
		return n
	}
	_ = eachMember(b, func(key string, v []byte) error {
		switch key {
		case "prompt_tokens":
			prompt = count(v)
		case "input_tokens":
			input = count(v)
		case "completion_tokens":
			completion = count(v)
		case "output_tokens":
			output = count(v)
		case "prompt_tokens_details":
			promptCached = cached(v)
		case "input_tokens_details":
			inputCached = cached(v)
		default:
			// A name encoding/json matches, ignoring case, to one of
			// these: its reading, which the fallback gives.
			for _, name := range usageNames {
				if strings.EqualFold(key, name) {
					ok = false
				}
			}
		}
		return nil
	})
	return Usage{PromptTokens: prompt + input, CompletionTokens: completion + output, CachedTokens: promptCached + inputCached}, ok
}

// usageNames are the members scanUsage reads.
var usageNames = [...]string{"prompt_tokens", "input_tokens", "completion_tokens", "output_tokens",
	"prompt_tokens_details", "input_tokens_details"}

// plainInt reads an integer of at most 18 digits, without exponent or
// fraction; false for anything else.
func plainInt(v []byte) (int, bool) {
	neg := len(v) > 0 && v[0] == '-'
	if neg {
		v = v[1:]
	}
	if len(v) == 0 || len(v) > 18 {
		return 0, false
	}
	n := 0
	for _, c := range v {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
	}
	if neg {
		n = -n
	}
	return n, true
}
