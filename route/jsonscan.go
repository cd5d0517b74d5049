package route

import (
	"bytes"
	"encoding/json"
	"unsafe"
)

// The scanning of JSON that json.Valid has accepted: top-level members
// located in place, arrays split, values skipped without decoding, as
// every endpoint's parse reads its body.

// member locates one top-level field of the raw body.
type member struct {
	key          string
	start, end   int // the whole member, from the key's opening quote
	vstart, vend int // its value
}

// eachMember calls fn with the name and value of each member of the
// object b, which json.Valid accepted, in order, until fn fails.
func eachMember(b []byte, fn func(key string, v []byte) error) error {
	i := skipSpace(b, skipSpace(b, 0)+1)
	for i < len(b) && b[i] != '}' {
		kend := skipString(b, i)
		key, err := unquoteKey(b[i:kend])
		if err != nil {
			return err
		}
		i = skipSpace(b, skipSpace(b, kend)+1) // past ':'
		vend := skipValue(b, i)
		if err := fn(key, b[i:vend]); err != nil {
			return err
		}
		if i = skipSpace(b, vend); i < len(b) && b[i] == ',' {
			i = skipSpace(b, i+1)
		}
	}
	return nil
}

// scanArray returns the elements of the array b, which json.Valid accepted.
func scanArray(b []byte) [][]byte { return scanArrayInto(make([][]byte, 0, 4), b) }

// scanArrayInto is scanArray appending to out (a caller's buffer, which
// may live on its stack).
func scanArrayInto(out [][]byte, b []byte) [][]byte {
	i := skipSpace(b, skipSpace(b, 0)+1)
	for i < len(b) && b[i] != ']' {
		end := skipValue(b, i)
		out = append(out, b[i:end])
		if i = skipSpace(b, end); i < len(b) && b[i] == ',' {
			i = skipSpace(b, i+1)
		}
	}
	return out
}

// scanObject lists the top-level members of b, which json.Valid accepted,
// appended to out.
func scanObject(out []member, b []byte) ([]member, error) {
	i := skipSpace(b, 0)
	if b[i] != '{' {
		return nil, invalid("", "the request body must be a JSON object")
	}
	var seen map[string]struct{}
	i = skipSpace(b, i+1)
	for b[i] != '}' {
		start := i
		kend := skipString(b, i)
		key, err := unquoteKey(b[start:kend])
		if err != nil {
			return nil, invalid("", "the request body has an unreadable field name")
		}
		if dup(out, &seen, key) {
			return nil, invalid(key, "is given more than once")
		}
		i = skipSpace(b, kend)
		i = skipSpace(b, i+1) // past ':'
		vstart := i
		vend := skipValue(b, i)
		out = append(out, member{key: key, start: start, end: vend, vstart: vstart, vend: vend})
		i = skipSpace(b, vend)
		if b[i] == ',' {
			i = skipSpace(b, i+1)
		}
	}
	return out, nil
}

// dup reports whether key is among the members found so far. A handful of
// members are compared in place; past that a set keeps a body of a million
// keys from costing a million squared comparisons.
func dup(members []member, seen *map[string]struct{}, key string) bool {
	const linear = 16
	if len(members) < linear {
		for _, m := range members {
			if m.key == key {
				return true
			}
		}
		return false
	}
	if *seen == nil {
		*seen = make(map[string]struct{}, 2*linear)
		for _, m := range members {
			(*seen)[m.key] = struct{}{}
		}
	}
	if _, ok := (*seen)[key]; ok {
		return true
	}
	(*seen)[key] = struct{}{}
	return false
}

func unquoteKey(q []byte) (string, error) {
	if bytes.IndexByte(q, '\\') < 0 {
		return intern(q[1 : len(q)-1]), nil
	}
	var s string
	err := json.Unmarshal(q, &s)
	return s, err
}

// interned are the names and short values every request repeats: member
// names the parsers look for and message roles. Reading one from a body
// takes the string here instead of allocating a copy.
var interned = func() map[string]string {
	m := map[string]string{}
	for _, s := range []string{
		"model", "messages", "stream", "stream_options", "include_usage", "max_tokens",
		"max_completion_tokens", "max_output_tokens", "n", "user", "prompt_cache_key",
		"temperature", "top_p", "tools", "tool_choice", "response_format", "seed", "stop",
		"metadata", "store", "role", "content", "name", "tool_call_id", "tool_calls",
		"type", "text", "image_url", "input", "instructions", "previous_response_id",
		"prompt", "encoding_format", "dimensions", "function", "arguments", "id",
		"system", "developer", "assistant", "tool", "input_text", "input_image",
		"frequency_penalty", "presence_penalty", "logprobs", "top_logprobs", "suffix",
		"echo", "best_of", "logit_bias", "parallel_tool_calls", "reasoning", "reasoning_effort",
		"safety_identifier", "service_tier", "conversation", "include", "background",
		"truncation", "gpt-4o", "gpt-4o-mini", "float", "base64",
		"prompt_tokens", "completion_tokens", "total_tokens", "prompt_tokens_details",
		"completion_tokens_details", "cached_tokens", "input_tokens", "output_tokens",
		"input_tokens_details", "output_tokens_details", "reasoning_tokens", "audio_tokens",
		"accepted_prediction_tokens", "rejected_prediction_tokens", "choices", "data",
		"usage", "object", "created", "system_fingerprint", "index", "message",
		"finish_reason", "refusal", "annotations", "embedding", "delta",
	} {
		m[s] = s
	}
	return m
}()

// intern returns b as a string, the interned one where b is among them
// (looking a []byte up in a map by string(b) does not allocate).
func intern(b []byte) string {
	if s, ok := interned[string(b)]; ok {
		return s
	}
	return string(b)
}

// alias returns b as a string that shares b's bytes: for text read from
// a request body, which its parse keeps and nothing modifies afterwards
// (ParseChatRequest's contract), so that a prompt is not copied.
func alias(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// skipString returns the index just past the string starting at b[i]: the
// first quote not escaped by an odd run of backslashes. It searches for
// quotes rather than walking every byte, as prompts are long strings.
func skipString(b []byte, i int) int {
	for j := i + 1; ; {
		q := j + bytes.IndexByte(b[j:], '"')
		k := q
		for k > j && b[k-1] == '\\' {
			k--
		}
		if (q-k)%2 == 0 {
			return q + 1
		}
		j = q + 1
	}
}

// skipValue returns the index just past the value starting at b[i].
func skipValue(b []byte, i int) int {
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for j := i; ; j++ {
			switch b[j] {
			case '"':
				j = skipString(b, j) - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return j + 1
				}
			}
		}
	}
	j := i
	for j < len(b) {
		switch b[j] {
		case ',', '}', ']', ' ', '\t', '\r', '\n':
			return j
		}
		j++
	}
	return j
}
