package node

import (
	"net/http"

	"github.com/llmesh/llmesh/node/ui"
)

// uiRoutes serves the dashboard, /ui/: it reads the admin API under the
// same rule (loopback clients only without an admin token; a session
// cookie from the token with one).
func (n *Node) uiRoutes(mux *http.ServeMux) {
	ui.New(ui.Config{
		Token:   n.s.AdminToken.Reveal(),
		Local:   func(r *http.Request) bool { return fromLoopback(r) && browserGuard(r) == nil },
		Refusal: errAdminRemote.Error(),
		Only:    n.only,
		Log:     n.log,
	}).Routes(mux)
}
