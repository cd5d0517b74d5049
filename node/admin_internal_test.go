package node

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/llmesh/llmesh/node/config"
)

// Without an admin token, the admin API answers loopback clients only
// (and, of those, not web pages: TestTokenlessAdminRefusesBrowsers).
func TestAdminWithoutTokenIsLoopbackOnly(t *testing.T) {
	n := &Node{s: &config.Runtime{}}
	called := 0
	h := n.admin(func(w http.ResponseWriter, r *http.Request) { called++ })
	for _, tc := range []struct {
		remote string
		want   int
	}{{"127.0.0.1:5000", 200}, {"[::1]:5000", 200}, {"10.0.0.7:5000", 403}, {"203.0.113.9:443", 403}} {
		r := httptest.NewRequest("GET", "/v1/mesh/members", nil)
		r.RemoteAddr = tc.remote
		r.Host = "127.0.0.1:8080" // as a tool on the host names it
		w := httptest.NewRecorder()
		h(w, r)
		if w.Code != tc.want {
			t.Errorf("%s: %d, want %d", tc.remote, w.Code, tc.want)
		}
	}
	if called != 2 {
		t.Fatalf("handler ran %d times", called)
	}
}
