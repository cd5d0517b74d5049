package emulator

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// benchmarkHandler measures the emulator's own cost per request, without a
// network: what it adds beside the gateway in a benchmark.
func benchmarkHandler(b *testing.B, extra string) {
	e, err := New(DefaultConfig())
	if err != nil {
		b.Fatal(err)
	}
	e.tok = testTokenizer
	testTokenizer.Count("warm up")
	h := e.Handler()
	payload := body("gpt-4o", extra)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		req := httptest.NewRequest(http.MethodPost, "/v1/chat/completions", strings.NewReader(payload))
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code != http.StatusOK {
			b.Fatalf("status %d: %s", w.Code, w.Body)
		}
	}
}

func BenchmarkChat(b *testing.B) { benchmarkHandler(b, "") }
func BenchmarkChatStream(b *testing.B) {
	benchmarkHandler(b, `"stream":true,"stream_options":{"include_usage":true}`)
}
func BenchmarkChatStreamLong(b *testing.B) { benchmarkHandler(b, `"stream":true,"max_tokens":256`) }
func BenchmarkChatTools(b *testing.B)      { benchmarkHandler(b, weatherTools) }
