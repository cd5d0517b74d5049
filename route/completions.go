package route

// defaultCompletionTokens is max_tokens of a legacy completion that gives
// none, as OpenAI's API (and vLLM's) defaults it.
const defaultCompletionTokens = 16

// ParseCompletionsRequest decodes and validates a legacy completions
// request: a model and a prompt (a string, an array of strings, an array
// of token ids or an array of arrays of them), max_tokens (16 when
// absent), n and best_of (both generate completions: the bound on the
// output counts the larger), stream and stream_options. Like
// ParseChatRequest it keeps body, refuses duplicate top-level fields and
// relays every other field (echo, suffix, logprobs, stop, vendor
// extensions) byte for byte. A completions request is served by chat
// models: no model declares it separately.
func ParseCompletionsRequest(body []byte) (*ChatRequest, error) {
	members, err := topMembers(body)
	if err != nil {
		return nil, err
	}
	r := &ChatRequest{API: APICompletions, raw: body, members: members, N: 1, MaxTokens: defaultCompletionTokens, defaultMax: true}
	var haveModel, havePrompt bool
	for _, m := range members {
		v := body[m.vstart:m.vend]
		switch m.key {
		case "model":
			haveModel = true
			err = decodeField(m.key, v, &r.Model)
		case "prompt":
			havePrompt = true
			err = r.decodeInput(m.key, v, true)
			r.prompts = promptCount(v)
		case "stream":
			err = decodeField(m.key, v, &r.Stream)
		case "stream_options":
			err = r.decodeStreamOptions(v)
		case "max_tokens":
			if v[0] != 'n' {
				r.MaxTokens, r.defaultMax = 0, false
				err = decodeCount(m.key, v, &r.MaxTokens, 0, 1<<30)
			}
		case "n":
			err = decodeCount(m.key, v, &r.N, 1, 128)
		case "best_of":
			err = decodeCount(m.key, v, &r.bestOf, 1, 128)
		case "user":
			err = decodeField(m.key, v, &r.User)
		}
		if err != nil {
			return nil, err
		}
	}
	switch {
	case !haveModel || r.Model == "":
		return nil, invalid("model", "is required")
	case !havePrompt:
		return nil, invalid("prompt", "is required")
	case r.bestOf != 0 && r.bestOf < r.N:
		return nil, invalid("best_of", "must be at least n (%d); got %d", r.N, r.bestOf)
	case r.bestOf > 1 && r.Stream:
		return nil, invalid("best_of", "cannot be used with stream")
	}
	if r.N == 0 {
		r.N = 1
	}
	if !r.Stream {
		r.IncludeUsage = false
	}
	return r, nil
}

// decodeStreamOptions reads stream_options: an object, or null.
func (r *ChatRequest) decodeStreamOptions(v []byte) error {
	var so struct {
		IncludeUsage bool `json:"include_usage"`
	}
	if v[0] != '{' && v[0] != 'n' {
		return invalid("stream_options", "must be an object")
	}
	if err := decodeField("stream_options", v, &so); err != nil {
		return err
	}
	r.IncludeUsage = so.IncludeUsage
	return nil
}

// Choices is how many completions the provider generates: n, or best_of
// when larger (it generates best_of and returns the n best), for each of
// a legacy completion's prompts.
func (r *ChatRequest) Choices() int { return max(r.N, r.bestOf) * max(r.prompts, 1) }

// promptCount is how many prompts a completions prompt holds: one string
// or one array of token ids is one; an array of strings or of token
// arrays is one each.
func promptCount(v []byte) int {
	if v[0] != '[' {
		return 1
	}
	items := scanArray(v)
	if len(items) == 0 || (items[0][0] != '"' && items[0][0] != '[') {
		return 1 // token ids: one prompt
	}
	return len(items)
}
