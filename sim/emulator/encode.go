package emulator

import (
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/llmesh/llmesh/route/anthropic"
)

// The answers are built by appending to byte slices rather than with
// encoding/json: a stream encodes one chunk per token, and benchmarks run the
// emulator beside the gateway on the same cores.

const hexDigits = "0123456789abcdef"

// appendString appends s as a JSON string. Invalid UTF-8 becomes U+FFFD, as
// encoding/json does; strconv.AppendQuote is not used because its escapes
// (\x01, \U0001f600) are not all JSON.
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i++
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// appendNullableString appends s as a JSON string, or null when it is empty.
func appendNullableString(b []byte, s string) []byte {
	if s == "" {
		return append(b, "null"...)
	}
	return appendString(b, s)
}

// appendUsage appends a CompletionUsage object: cached of the prompt
// tokens found in the prompt cache, the other details zero.
func appendUsage(b []byte, prompt, completion, cached int) []byte {
	b = append(b, `{"prompt_tokens":`...)
	b = strconv.AppendInt(b, int64(prompt), 10)
	b = append(b, `,"completion_tokens":`...)
	b = strconv.AppendInt(b, int64(completion), 10)
	b = append(b, `,"total_tokens":`...)
	b = strconv.AppendInt(b, int64(prompt+completion), 10)
	b = append(b, `,"prompt_tokens_details":{"cached_tokens":`...)
	b = strconv.AppendInt(b, int64(cached), 10)
	return append(b, `,"audio_tokens":0},"completion_tokens_details":{"reasoning_tokens":0,"audio_tokens":0,"accepted_prediction_tokens":0,"rejected_prediction_tokens":0}}`...)
}

// contentFilterResults is Azure's verdict on a prompt or a choice: nothing
// filtered.
const contentFilterResults = `{"hate":{"filtered":false,"severity":"safe"},"self_harm":{"filtered":false,"severity":"safe"},"sexual":{"filtered":false,"severity":"safe"},"violence":{"filtered":false,"severity":"safe"}}`

// promptFilterResults is Azure's prompt_filter_results member.
const promptFilterResults = `"prompt_filter_results":[{"prompt_index":0,"content_filter_results":` + contentFilterResults + `}]`

// systemFingerprint is the backend configuration the answers claim.
const systemFingerprint = "fp_emulator"

// apiError is an error answer in OpenAI's shape.
type apiError struct {
	status  int
	message string
	typ     string // invalid_request_error, server_error, requests, ...
	param   string // "" is null
	code    string // "" is null
}

func (e *apiError) appendJSON(b []byte) []byte {
	b = append(b, `{"error":{"message":`...)
	b = appendString(b, e.message)
	b = append(b, `,"type":`...)
	b = appendString(b, e.typ)
	b = append(b, `,"param":`...)
	b = appendNullableString(b, e.param)
	b = append(b, `,"code":`...)
	b = appendNullableString(b, e.code)
	return append(b, "}}"...)
}

// appendAnthropicJSON appends e in Anthropic's shape:
// {"type":"error","error":{"type":...,"message":...}}. A parameter is
// named in the message, as Anthropic does ("max_tokens: Field required").
func (e *apiError) appendAnthropicJSON(b []byte) []byte {
	b = append(b, `{"type":"error","error":{"type":`...)
	b = appendString(b, anthropic.ErrorType(e.status))
	b = append(b, `,"message":`...)
	msg := e.message
	if e.param != "" && !strings.HasPrefix(msg, e.param+":") {
		msg = e.param + ": " + msg
	}
	b = appendString(b, msg)
	return append(b, "}}"...)
}
