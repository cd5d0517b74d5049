package emulator

import (
	"encoding/json"
	"errors"
	"strconv"
)

// decodeBody decodes a JSON request body into v, which names its fields
// with json tags. A body that is not JSON, not an object, or has a member
// of the wrong type gets 400 naming the member.
func decodeBody(body []byte, v any) *apiError {
	if !json.Valid(body) {
		return invalidParam("", "We could not parse the JSON body of your request. The request body is not valid JSON.")
	}
	err := json.Unmarshal(body, v)
	var te *json.UnmarshalTypeError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &te) && te.Field == "":
		return invalidParam("", "The request body must be a JSON object.")
	case errors.As(err, &te):
		return invalidParam(te.Field, "Invalid type for '"+te.Field+"': expected "+jsonKind(te.Type.Kind().String())+", but got "+te.Value+".")
	}
	var ae *apiError
	if errors.As(err, &ae) {
		return ae
	}
	return invalidParam("", "The request body could not be decoded: "+err.Error())
}

// Error lets a custom UnmarshalJSON return an apiError through
// json.Unmarshal.
func (e *apiError) Error() string { return e.message }

// jsonKind names a Go kind as JSON does.
func jsonKind(kind string) string {
	switch kind {
	case "string":
		return "a string"
	case "bool":
		return "a boolean"
	case "slice", "array":
		return "an array"
	case "map", "struct":
		return "an object"
	case "float32", "float64":
		return "a number"
	}
	return "an integer"
}

// promptInput is one prompt of an embeddings or legacy completions
// request: a string, or token ids.
type promptInput struct {
	text     string
	tokens   []int
	isTokens bool
}

// key is a hash of the input, the same for the same text or tokens.
func (p *promptInput) key() uint64 {
	if !p.isTokens {
		return fnv(p.text)
	}
	h := uint64(0x84222325cbf29ce4)
	for _, t := range p.tokens {
		h = mix(h ^ uint64(t))
	}
	return h
}

// readPrompts decodes an input or prompt member: a string, an array of
// strings, an array of token ids or an array of token arrays. Empty
// strings, empty arrays and more than 2048 prompts get 400 naming param.
func readPrompts(raw json.RawMessage, param string) ([]promptInput, *apiError) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, invalidParam(param, "Missing required parameter: '"+param+"'.")
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		if s == "" {
			return nil, invalidParam(param, "'"+param+"' must not be an empty string.")
		}
		return []promptInput{{text: s}}, nil
	}
	var items []json.RawMessage
	if json.Unmarshal(raw, &items) != nil {
		return nil, invalidParam(param, "'"+param+"' must be a string, an array of strings, an array of integers or an array of arrays of integers.")
	}
	switch {
	case len(items) == 0:
		return nil, invalidParam(param, "'"+param+"' must not be an empty array.")
	case len(items) > 2048:
		return nil, invalidParam(param, "'"+param+"' must have at most 2048 items, got "+strconv.Itoa(len(items))+".")
	}
	var ids []int
	if json.Unmarshal(raw, &ids) == nil {
		return []promptInput{{tokens: ids, isTokens: true}}, nil
	}
	out := make([]promptInput, len(items))
	for i, it := range items {
		at := param + "[" + strconv.Itoa(i) + "]"
		switch {
		case json.Unmarshal(it, &out[i].text) == nil:
			if out[i].text == "" {
				return nil, invalidParam(at, "'"+at+"' must not be an empty string.")
			}
		case json.Unmarshal(it, &out[i].tokens) == nil:
			if len(out[i].tokens) == 0 {
				return nil, invalidParam(at, "'"+at+"' must not be an empty array.")
			}
			out[i].isTokens = true
		default:
			return nil, invalidParam(at, "'"+at+"' must be a string or an array of integers.")
		}
	}
	if mixed(out) {
		return nil, invalidParam(param, "'"+param+"' must not mix strings and token arrays.")
	}
	return out, nil
}

func mixed(ps []promptInput) bool {
	for i := range ps {
		if ps[i].isTokens != ps[0].isTokens {
			return true
		}
	}
	return false
}

// countPrompts is the tokens of ps: each string counted with the
// tokenizer, each token array its length.
func (x *exchange) countPrompts(ps []promptInput) int {
	n := 0
	for i := range ps {
		if ps[i].isTokens {
			n += len(ps[i].tokens)
		} else {
			n += x.e.tok.Count(ps[i].text)
		}
	}
	return n
}
