package route

import (
	"bytes"
	"encoding/json"
)

// HeaderUpstreamModel names, for operators, the provider's own name for
// the model that answered, when it is not the mesh's; the answer's body
// keeps the mesh's name.
const HeaderUpstreamModel = "X-Llmesh-Upstream-Model"

// answerModel is the model an answer names: the mesh's name for the model
// served (what the client asked for, or its group's choice), never the
// provider's own name for it. The node that calls the provider rewrites
// its answer; a node relaying a forward passes it on as it is, so the
// rewrite happens exactly once.
func (t *Target) answerModel() string { return t.Offer.Model.Name }

// withModel sets the top-level "model" string of the JSON object in data
// to name, building the result in dst (whose bytes it overwrites); it
// reports false, and leaves dst alone, when data has no such member or
// names name already. Only the members before "model" are walked, without
// decoding; every other byte is kept.
func withModel(dst, data []byte, name string) ([]byte, bool) {
	if !bytes.Contains(data, []byte(`"model"`)) {
		return dst, false
	}
	v, ok := topValue(data, `"model"`)
	if !ok || data[v] != '"' {
		return dst, false
	}
	end := valueEnd(data, v)
	if end < 0 || end-v == len(name)+2 && string(data[v+1:end-1]) == name {
		return dst, false
	}
	if need := len(data) - (end - v) + len(name) + 2; cap(dst) < need {
		dst = make([]byte, 0, need+need/4) // once: one growth, not several
	}
	dst = append(dst[:0], data[:v]...)
	dst = appendJSONString(dst, name)
	return append(dst, data[end:]...), true
}

// appendJSONString appends s as a JSON string. Model names are plain
// ASCII, appended as they are; anything else is escaped by encoding/json.
func appendJSONString(dst []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' {
			q, _ := json.Marshal(s)
			return append(dst, q...)
		}
	}
	dst = append(dst, '"')
	dst = append(dst, s...)
	return append(dst, '"')
}
