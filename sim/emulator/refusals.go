package emulator

import (
	"net/http"
	"strconv"
	"strings"
)

// Context windows the context_length refusals name.
const (
	openAIContextTokens    = 8192
	anthropicContextTokens = 200000
)

// azureContentFilter is Azure OpenAI's refusal of a prompt its content
// filter caught, as it answers it: 400, code content_filter, the inner
// error ResponsibleAIPolicyViolation with each category's result.
const azureContentFilter = `{"error":{"message":"The response was filtered due to the prompt triggering Azure OpenAI's content management policy. ` +
	`Please modify your prompt and retry. To learn more about our content filtering policies please read our documentation: ` +
	`https://go.microsoft.com/fwlink/?linkid=2198766","type":null,"param":"prompt","code":"content_filter","status":400,` +
	`"innererror":{"code":"ResponsibleAIPolicyViolation","content_filter_result":{"hate":{"filtered":false,"severity":"safe"},` +
	`"jailbreak":{"filtered":false,"detected":false},"self_harm":{"filtered":false,"severity":"safe"},` +
	`"sexual":{"filtered":false,"severity":"safe"},"violence":{"filtered":true,"severity":"medium"}}}}}`

// generating reports whether ep generates an answer: the endpoints a
// content filter or a context window refuses.
func (ep endpoint) generating() bool {
	switch ep {
	case epChat, epAzureChat, epEmbeddings, epAzureEmbeddings, epCompletions, epAzureCompletions, epMessages, epResponses:
		return true
	}
	return false
}

// refusedByMode answers a generating request 400 in ModeContentFilter
// and ModeContextLength, in the shape of its path's API, and reports
// whether it did.
func (x *exchange) refusedByMode(body []byte) bool {
	m := x.e.Mode()
	if (m != ModeContentFilter && m != ModeContextLength) || !x.ep.generating() {
		return false
	}
	azure := x.ep.azure() || strings.HasPrefix(x.r.URL.Path, "/openai/")
	switch {
	case m == ModeContentFilter && azure:
		x.answer(http.StatusBadRequest, "application/json", []byte(azureContentFilter))
	case m == ModeContentFilter && x.ep.anthropic():
		x.fail(&apiError{status: http.StatusBadRequest, message: "Output blocked by content filtering policy", typ: "invalid_request_error"})
	case m == ModeContentFilter:
		x.fail(&apiError{status: http.StatusBadRequest, typ: "invalid_request_error", code: "invalid_prompt",
			message: "Invalid prompt: your prompt was flagged as potentially violating our usage policy. Please try again with a different prompt: " +
				"https://platform.openai.com/docs/guides/reasoning#advice-on-prompting"})
	case x.ep.anthropic():
		n := max(x.e.tok.Count(string(body)), anthropicContextTokens+1)
		x.fail(&apiError{status: http.StatusBadRequest, typ: "invalid_request_error",
			message: "prompt is too long: " + strconv.Itoa(n) + " tokens > " + strconv.Itoa(anthropicContextTokens) + " maximum"})
	default:
		n := max(x.e.tok.Count(string(body)), openAIContextTokens+1)
		x.fail(&apiError{status: http.StatusBadRequest, typ: "invalid_request_error", param: "messages", code: "context_length_exceeded",
			message: "This model's maximum context length is " + strconv.Itoa(openAIContextTokens) + " tokens. However, your messages resulted in " +
				strconv.Itoa(n) + " tokens. Please reduce the length of the messages."})
	}
	return true
}
