package route

import "strings"

// API is which of the OpenAI endpoints a request was sent to. The
// planner, executor and ledger treat every API alike (a prompt, maybe a
// completion, a model and its prices); what differs is how the body is
// read, the path it is sent to and the shape of the answer.
type API uint8

// The APIs a node serves.
const (
	APIChat       API = iota // POST /v1/chat/completions
	APIEmbeddings            // POST /v1/embeddings
)

// String is the API's name in metrics, decisions and the audit trail.
func (a API) String() string {
	switch a {
	case APIEmbeddings:
		return "embeddings"
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
	}
	return 0, false
}

// path is the API's path below an OpenAI base's /v1 or an Azure
// deployment.
func (a API) path() string {
	if a == APIEmbeddings {
		return "/embeddings"
	}
	return "/chat/completions"
}

// Parse decodes and validates body as a request of the API.
func (a API) Parse(body []byte) (*ChatRequest, error) {
	if a == APIEmbeddings {
		return ParseEmbeddingsRequest(body)
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
