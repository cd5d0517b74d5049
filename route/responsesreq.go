package route

import (
	"slices"
	"strconv"
)

// Prior is what a Responses follow-up (previous_response_id) continues,
// as the node that relayed the earlier response recorded it: the
// provider that holds it, which alone can continue it, and the context
// it adds to the prompt.
type Prior struct {
	ID       string
	Provider string
	// Tokens bounds the context the provider prepends: the earlier
	// response's input and output tokens (for a bridged one, the bytes of
	// its conversation, which bound them).
	Tokens int
	// Conversation is a bridged response's chat messages (the provider
	// stores nothing; route/responses.Conversation), nil for a native one.
	Conversation []byte
}

// ParseResponsesRequest decodes and validates a Responses create request:
// a model, an input (a string or an array of items), instructions,
// tools, max_output_tokens, stream, previous_response_id, store and
// prompt_cache_key. Like
// ParseChatRequest it keeps body, refuses duplicate top-level fields, and
// leaves every field it does not read to reach a provider that serves
// the Responses API byte for byte (a bridged one gets route/responses'
// translation). The text it reads is the prompt's, for planning and for
// counting when a provider reports no usage; the raw body bounds it.
func ParseResponsesRequest(body []byte) (*ChatRequest, error) {
	members, err := topMembers(body)
	if err != nil {
		return nil, err
	}
	r := &ChatRequest{API: APIResponses, raw: body, members: members, N: 1, Store: true}
	var haveModel, haveInput bool
	for _, m := range members {
		v := body[m.vstart:m.vend]
		switch m.key {
		case "model":
			haveModel = true
			err = decodeField(m.key, v, &r.Model)
		case "input":
			haveInput = v[0] != 'n'
			err = r.decodeResponsesInput(v)
		case "instructions":
			var s *string
			if err = decodeField(m.key, v, &s); err == nil && s != nil {
				r.addPromptText(*s)
				// The model reads the instructions first, wherever the
				// body puts them: the prompt's prefix starts with them.
				r.inputs = slices.Insert(r.inputs[:len(r.inputs)-1], 0, *s)
			}
		case "prompt_cache_key":
			err = decodeNullableString(m.key, v, &r.CacheKey)
		case "stream":
			err = decodeNullable(m.key, v, &r.Stream)
		case "store":
			err = decodeNullable(m.key, v, &r.Store)
		case "max_output_tokens":
			err = decodeCount(m.key, v, &r.MaxTokens, 1, 1<<30)
		case "previous_response_id":
			var s *string
			if err = decodeField(m.key, v, &s); err == nil && s != nil {
				if *s == "" || len(*s) > 256 {
					err = invalid(m.key, "must be a response id")
				}
				r.PreviousResponseID = *s
			}
		case "tools":
			if v[0] != '[' && v[0] != 'n' {
				err = invalid(m.key, "must be an array of tools")
			}
		case "user", "safety_identifier":
			if r.User == "" {
				var s *string
				if err = decodeField(m.key, v, &s); err == nil && s != nil {
					r.User = *s
				}
			}
		}
		if err != nil {
			return nil, err
		}
	}
	switch {
	case !haveModel || r.Model == "":
		return nil, invalid("model", "is required")
	case !haveInput && r.PreviousResponseID == "":
		return nil, invalid("input", "is required")
	}
	return r, nil
}

// decodeNullable decodes a boolean that may be null (left as it is).
func decodeNullable(param string, v []byte, dst *bool) error {
	if v[0] == 'n' {
		return nil
	}
	return decodeField(param, v, dst)
}

// addPromptText adds s to the prompt's text: an item's framing and its
// text, counted as a chat message's are.
func (r *ChatRequest) addPromptText(s string) {
	r.inputs = append(r.inputs, s)
	r.textBytes += len(s)
	r.inputTokens += tokensPerMessage
}

// decodeResponsesInput reads a Responses input: a string, or an array of
// items, each an object with a string type (or, for a message, a role).
// The text of messages, function calls and their outputs is the prompt's.
func (r *ChatRequest) decodeResponsesInput(v []byte) error {
	switch v[0] {
	case 'n':
		return nil
	case '"':
		var s string
		if err := decodeString(v, &s); err != nil {
			return invalid("input", "%s", err.Error())
		}
		r.addPromptText(s)
		return nil
	case '[':
	default:
		return invalid("input", "must be a string or an array of input items")
	}
	for i, it := range scanArray(v) {
		param := "input[" + strconv.Itoa(i) + "]"
		var item struct {
			Type      *string `json:"type"`
			Role      *string `json:"role"`
			Content   Content `json:"content"`
			Name      string  `json:"name"`
			Arguments string  `json:"arguments"`
			Output    Content `json:"output"`
		}
		if it[0] != '{' {
			return invalid(param, "must be an object")
		}
		if err := decodeField(param, it, &item); err != nil {
			return err
		}
		if item.Type == nil && item.Role == nil {
			return invalid(param+".type", "is required")
		}
		text := item.Name + item.Arguments
		for _, c := range [2]*Content{&item.Content, &item.Output} {
			text += c.Text
			for _, p := range c.Parts {
				text += p.Text
				if p.Type == "input_image" {
					r.images++
				}
			}
		}
		r.addPromptText(text)
	}
	return nil
}
