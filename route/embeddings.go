package route

import "strconv"

// maxEmbeddingInputs is OpenAI's bound on the inputs of one embeddings
// request.
const maxEmbeddingInputs = 2048

// ParseEmbeddingsRequest decodes and validates an embeddings request: a
// model, and an input that is a string, an array of strings, an array of
// token ids or an array of arrays of them. Like ParseChatRequest it keeps
// body, refuses duplicate top-level fields, and leaves every field it does
// not read (encoding_format, dimensions, vendor extensions) to reach the
// provider byte for byte. The request has no completion: its cost is its
// input.
func ParseEmbeddingsRequest(body []byte) (*ChatRequest, error) {
	members, err := topMembers(body)
	if err != nil {
		return nil, err
	}
	r := &ChatRequest{API: APIEmbeddings, raw: body, members: members, N: 1}
	var haveModel, haveInput bool
	for _, m := range members {
		v := body[m.vstart:m.vend]
		switch m.key {
		case "model":
			haveModel = true
			if err := decodeField(m.key, v, &r.Model); err != nil {
				return nil, err
			}
		case "input":
			haveInput = true
			if err := r.decodeInput(m.key, v, false); err != nil {
				return nil, err
			}
		case "encoding_format":
			var f string
			if err := decodeField(m.key, v, &f); err != nil {
				return nil, err
			}
			if f != "float" && f != "base64" {
				return nil, invalid(m.key, "must be float or base64; got %q", f)
			}
		case "dimensions":
			var d int
			if err := decodeCount(m.key, v, &d, 1, 1<<16); err != nil {
				return nil, err
			}
		case "user":
			if err := decodeField(m.key, v, &r.User); err != nil {
				return nil, err
			}
		case "stream":
			return nil, invalid(m.key, "is not a parameter of embeddings")
		}
	}
	switch {
	case !haveModel || r.Model == "":
		return nil, invalid("model", "is required")
	case !haveInput:
		return nil, invalid("input", "is required")
	}
	return r, nil
}

// decodeInput reads an embeddings input or a completions prompt (key):
// its texts (counted as a chat's message text is) or its token ids
// (counted exactly). A prompt may be an empty string, an input not.
func (r *ChatRequest) decodeInput(key string, v []byte, emptyText bool) error {
	switch v[0] {
	case '"':
		var s string
		if err := decodeString(v, &s); err != nil {
			return invalid(key, "%s", err.Error())
		}
		return r.addInput(key, s, emptyText)
	case '[':
	default:
		return invalid(key, "must be a string, an array of strings, an array of token ids or an array of arrays of token ids")
	}
	items := scanArray(v)
	switch {
	case len(items) == 0:
		return invalid(key, "must not be empty")
	case len(items) > maxEmbeddingInputs:
		return invalid(key, "must have at most %d items; got %d", maxEmbeddingInputs, len(items))
	}
	for i, it := range items {
		param := key + "[" + strconv.Itoa(i) + "]"
		switch it[0] {
		case '"':
			var s string
			if err := decodeString(it, &s); err != nil {
				return invalid(param, "%s", err.Error())
			}
			if err := r.addInput(param, s, emptyText); err != nil {
				return err
			}
		case '[':
			ids := scanArray(it)
			if len(ids) == 0 {
				return invalid(param, "must not be empty")
			}
			for j, id := range ids {
				if err := tokenID(param+"["+strconv.Itoa(j)+"]", id); err != nil {
					return err
				}
			}
			r.inputTokens += len(ids)
		default:
			if err := tokenID(param, it); err != nil {
				return err
			}
			r.inputTokens++
		}
	}
	return nil
}

func (r *ChatRequest) addInput(param, s string, emptyText bool) error {
	if s == "" && !emptyText {
		return invalid(param, "must not be an empty string")
	}
	r.inputs = append(r.inputs, s)
	r.textBytes += len(s)
	return nil
}

// tokenID checks one token id: a non-negative integer.
func tokenID(param string, v []byte) error {
	if n, err := strconv.ParseInt(string(v), 10, 64); err != nil || n < 0 || n > 1<<31 {
		return invalid(param, "must be a token id, a non-negative integer")
	}
	return nil
}

// Inputs are an embeddings request's input texts, or a completions
// request's prompts (token ids excepted).
func (r *ChatRequest) Inputs() []string { return r.inputs }
