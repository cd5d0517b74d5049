package route

import "testing"

func TestURLForEachAPI(t *testing.T) {
	for _, c := range []struct{ chat, want string }{
		{"http://gpu:8000/v1/chat/completions", "http://gpu:8000/v1/embeddings"},
		{"https://x.openai.azure.com/openai/deployments/emb/chat/completions?api-version=2024-10-21",
			"https://x.openai.azure.com/openai/deployments/emb/embeddings?api-version=2024-10-21"},
	} {
		if got := urlFor(c.chat, APIEmbeddings); got != c.want {
			t.Errorf("urlFor(%s) = %s; want %s", c.chat, got, c.want)
		}
		if got := urlFor(c.chat, APIChat); got != c.chat {
			t.Errorf("chat's URL changed: %s", got)
		}
	}
}

// An embeddings request's prompt bound holds for text and token ids, and
// it asks for no completion.
func TestEmbeddingsEstimate(t *testing.T) {
	var tok Tokenizer
	for _, body := range []string{
		`{"model":"e","input":"The quick brown fox jumps over the lazy dog"}`,
		`{"model":"e","input":["a","bb",  "ccc ddd"]}`,
		`{"model":"e","input":[1,2,3,4,5,6,7,8,9,10]}`,
		`{"model":"e","input":[[100,200],[300]]}`,
	} {
		r, err := ParseEmbeddingsRequest([]byte(body))
		if err != nil {
			t.Fatalf("%s: %v", body, err)
		}
		exact := tok.CountPrompt(r)
		expected, upper := r.PromptEstimate()
		if exact > upper || expected <= 0 || r.MaxTokens != 0 || r.API != APIEmbeddings {
			t.Errorf("%s: counted %d, estimated %d, bound %d", body, exact, expected, upper)
		}
	}
}
