package route

import (
	"strings"
	"sync"
)

// o200kPattern is the pre-tokenisation pattern of OpenAI's o200k_base
// encoding (gpt-4o, gpt-4.1, o-series and later), as tiktoken defines it.
var o200kPattern = strings.Join([]string{
	`[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?`,
	`[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?`,
	`\p{N}{1,3}`,
	` ?[^\s\p{L}\p{N}]+[\r\n/]*`,
	`\s*[\r\n]+`,
	`\s+(?!\S)`,
	`\s+`,
}, "|")

// Tokenizer counts tokens exactly with the o200k_base encoding, loaded from
// the BPE ranks embedded in the binary (tiktoken-go-loader): the node never
// downloads anything at run time. Counting costs about 0.7 µs a token, most
// of it in the pattern's matcher (BenchmarkCount), so the hot path
// estimates instead (see PromptEstimate) and exact counts are kept for
// accounting when an upstream reports no usage.
//
// The zero value is ready to use and safe for concurrent use.
type Tokenizer struct{}

// o200k is the encoder, built on first use and shared by every
// Tokenizer of the process: it is immutable once built, and building it
// takes about 20 ms and keeps 4.1 MB (BenchmarkO200kLoad).
var o200k = sync.OnceValues(newO200kEncoder)

// Count returns the number of tokens in text. Special-token text such as
// "<|endoftext|>" is counted as ordinary text, as the API does for user
// content. If the embedded ranks cannot be loaded (a broken build), Count
// falls back to the byte length, which is an upper bound.
func (Tokenizer) Count(text string) int {
	enc, err := o200k()
	if err != nil {
		return len(text)
	}
	return enc.count(text)
}

// Err reports whether the encoder failed to load.
func (Tokenizer) Err() error {
	_, err := o200k()
	return err
}

// Chat-format overheads from OpenAI's token counting guide: each message
// costs its content plus three tokens of framing (four when it has a name),
// and every reply is primed with three more.
const (
	tokensPerMessage = 3
	tokensPerName    = 1
	tokensReplyPrime = 3
	// tokensPerImage bounds what one image part can cost: a 2048×768 image
	// at high detail is 8 tiles × 170 + 85 = 1445 tokens on gpt-4o.
	tokensPerImage = 1536
)

// CountMessages returns the prompt tokens of msgs as OpenAI counts them for
// chat models: content, role and name of every message plus framing.
func (t Tokenizer) CountMessages(msgs []Message) int {
	n := tokensReplyPrime
	for i := range msgs {
		m := &msgs[i]
		n += tokensPerMessage + t.Count(m.Role)
		if m.Name != "" {
			n += tokensPerName + t.Count(m.Name)
		}
		for _, text := range m.texts() {
			n += t.Count(text)
		}
		n += m.images * tokensPerImage
		for _, tc := range m.ToolCalls {
			n += t.Count(tc.Function.Name) + t.Count(tc.Function.Arguments)
		}
	}
	return n
}

// CountPrompt returns the prompt tokens of r as the provider counts them:
// a chat's messages with their framing, an embeddings request's inputs.
func (t Tokenizer) CountPrompt(r *ChatRequest) int {
	if !r.API.inputs() {
		return t.CountMessages(r.Messages)
	}
	n := r.inputTokens + r.priorTokens()
	for _, s := range r.inputs {
		n += t.Count(s)
	}
	return n
}

// PromptEstimate returns the prompt tokens of r without tokenising: an
// expected figure for planning (about four bytes a token, as for English on
// OpenAI's encodings) and a true upper bound for reservations. The bound
// holds because every token of o200k_base and cl100k_base encodes at least
// one byte, and everything a model reads — messages, tool definitions,
// response schemas — is in the body, escaped no shorter than it is read;
// images, which the body may only link to, are bounded by tokensPerImage.
func (r *ChatRequest) PromptEstimate() (expected, upper int) {
	framing := tokensReplyPrime + len(r.Messages)*(tokensPerMessage+tokensPerName)
	if r.API.inputs() {
		// Token ids given as numbers (exact; their digits bound them in
		// raw too), a Responses item's framing, the context a follow-up
		// continues.
		framing = r.inputTokens + r.priorTokens()
	}
	raw := len(r.raw)
	if r.raw == nil {
		raw = r.rawLen // a synthetic request
	}
	extra := raw - r.textBytes // tool schemas, response formats, JSON syntax
	expected = framing + (r.textBytes+3)/4 + extra/16 + r.images*tokensPerImage/2
	upper = framing + raw + r.images*tokensPerImage
	return expected, upper
}

// inputs reports whether the API's prompt is read as inputs (texts and
// token ids) rather than as chat messages.
func (a API) inputs() bool { return a == APIEmbeddings || a == APICompletions || a == APIResponses }

// priorTokens is the context a Responses follow-up continues.
func (r *ChatRequest) priorTokens() int {
	if r.Prior == nil {
		return 0
	}
	return r.Prior.Tokens
}
