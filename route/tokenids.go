package route

// Token ids EncodeMessages frames messages with: beyond o200k_base's
// ordinary and special tokens, so that no text encodes to them.
const (
	TokenMessageStart = 200019 + iota // opens a message, before its role
	TokenMessageName                  // before a message's name
	TokenMessageBody                  // between the role (and name) and the content
	TokenMessageEnd                   // closes a message
	TokenImage                        // stands for one token of an image part
)

// Encode returns the o200k_base token ids of text, as many as Count
// counts. Without the encoder (a broken build) it returns the bytes of
// text, Count's fallback.
func (Tokenizer) Encode(text string) []int {
	enc, err := o200k()
	if err != nil {
		ids := make([]int, len(text))
		for i := range len(text) {
			ids[i] = int(text[i])
		}
		return ids
	}
	return enc.encode(text, make([]int, 0, len(text)/4+1))
}

// EncodeMessages returns token ids standing for msgs as a chat template
// lays them out, as many as CountMessages counts: each message is
// TokenMessageStart, its role, TokenMessageName and its name if it has
// one, TokenMessageBody, its texts, TokenImage for each token an image
// may cost, its tool calls' names and arguments, and TokenMessageEnd;
// then the reply is primed with TokenMessageStart, "assistant" and
// TokenMessageBody. A conversation's next turn therefore starts with the
// ids of this one, and the assistant's answer continues them, as prefix
// caching by token ids needs. encode encodes each text (a caller may
// cache what it has seen); nil means Encode.
func (t Tokenizer) EncodeMessages(msgs []Message, encode func(string) []int) []int {
	if encode == nil {
		encode = t.Encode
	}
	ids := make([]int, 0, 64)
	for i := range msgs {
		m := &msgs[i]
		ids = append(ids, TokenMessageStart)
		ids = append(ids, encode(m.Role)...)
		if m.Name != "" {
			ids = append(ids, TokenMessageName)
			ids = append(ids, encode(m.Name)...)
		}
		ids = append(ids, TokenMessageBody)
		for _, text := range m.texts() {
			ids = append(ids, encode(text)...)
		}
		for range m.images * tokensPerImage {
			ids = append(ids, TokenImage)
		}
		for _, tc := range m.ToolCalls {
			ids = append(ids, encode(tc.Function.Name)...)
			ids = append(ids, encode(tc.Function.Arguments)...)
		}
		ids = append(ids, TokenMessageEnd)
	}
	return append(ids, t.replyPrime(encode)...)
}

// replyPrime is the ids a reply is primed with, tokensReplyPrime of them:
// the framing of an assistant message up to its content.
func (t Tokenizer) replyPrime(encode func(string) []int) []int {
	role := encode("assistant")
	if len(role) != tokensReplyPrime-2 {
		role = []int{TokenMessageBody} // not one token: keep the count right
	}
	return append(append([]int{TokenMessageStart}, role...), TokenMessageBody)
}
