package route

import "strings"

// API is which of the OpenAI endpoints a request was sent to. The
// planner, executor and ledger treat every API alike (a prompt, maybe a
// completion, a model and its prices); what differs is how the body is
// read, the path it is sent to and the shape of the answer.
type API uint8

// The APIs a node serves.
const (
	APIChat        API = iota // POST /v1/chat/completions
	APIEmbeddings             // POST /v1/embeddings
	APICompletions            // POST /v1/completions (legacy)
	// APIMessages is Anthropic's POST /v1/messages, translated into a
	// chat completion at the node the client called: the mesh serves it
	// as chat, and labels it messages.
	APIMessages
	// APIResponses is OpenAI's POST /v1/responses: passed through to a
	// provider that serves it (KindOpenAI, KindAzure), bridged to chat
	// completions for one that does not (route/responses).
	APIResponses
)

// ServedAPIs is the set of APIs this build serves, one bit an API: what
// a node gossips (gossip.Meta.APIs), so that a peer forwards it only the
// requests it can read.
const ServedAPIs = 1<<APIChat | 1<<APIEmbeddings | 1<<APICompletions | 1<<APIMessages | 1<<APIResponses

// In reports whether a node gossiping apis serves a forward of a: chat
// always, as a node from before the set was gossiped (apis 0) does.
func (a API) In(apis uint64) bool { return a == APIChat || apis&(1<<a) != 0 }

// String is the API's name in metrics, decisions and the audit trail.
func (a API) String() string {
	switch a {
	case APIEmbeddings:
		return "embeddings"
	case APICompletions:
		return "completions"
	case APIMessages:
		return "messages"
	case APIResponses:
		return "responses"
	}
	return "chat"
}

// ParseAPI is the API named s (as String names it); false for none.
func ParseAPI(s string) (API, bool) {
	switch s {
	case "", "chat":
		return APIChat, true
	case "embeddings":
		return APIEmbeddings, true
	case "completions":
		return APICompletions, true
	case "messages":
		return APIMessages, true
	case "responses":
		return APIResponses, true
	}
	return 0, false
}

// served is what a model must serve to take a request of the API: a
// chat model takes legacy completions, Messages and Responses too.
func (a API) served() API {
	if a == APICompletions || a == APIMessages || a == APIResponses {
		return APIChat
	}
	return a
}

// path is the API's path below an OpenAI base's /v1 or an Azure
// deployment.
func (a API) path() string {
	switch a {
	case APIEmbeddings:
		return "/embeddings"
	case APICompletions:
		return "/completions"
	case APIResponses:
		return "/responses"
	}
	return "/chat/completions"
}

// Parse decodes and validates body as a request of the API.
func (a API) Parse(body []byte) (*ChatRequest, error) {
	switch a {
	case APIEmbeddings:
		return ParseEmbeddingsRequest(body)
	case APICompletions:
		return ParseCompletionsRequest(body)
	case APIResponses:
		return ParseResponsesRequest(body)
	case APIMessages: // the translated body is a chat completion's
		r, err := ParseChatRequest(body)
		if r != nil {
			r.API = APIMessages
		}
		return r, err
	}
	return ParseChatRequest(body)
}

// urlFor turns an offer's chat completions URL into the API's: the same
// base (and, for Azure, deployment and api-version), another path.
func urlFor(chatURL string, a API) string {
	if a == APIChat {
		return chatURL
	}
	base, query, _ := strings.Cut(chatURL, "?")
	base = strings.TrimSuffix(base, APIChat.path()) + a.path()
	if query != "" {
		return base + "?" + query
	}
	return base
}
