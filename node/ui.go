package node

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"embed"
	"encoding/hex"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// The dashboard is three static files embedded in the binary. It reads
// the admin API from the browser, so it shows what `llmesh status`,
// `members`, `providers` and `budgets` show, and needs no build step.
//
//go:embed ui/index.html ui/login.html ui/app.js ui/app.css
var uiFiles embed.FS

const (
	uiCookie     = "llmesh_ui"
	uiSessionFor = 12 * time.Hour
)

// uiRoutes serves GET /ui/ and its sign-in. Without an admin token the
// dashboard, like the admin API, answers loopback clients only. With
// one, a browser signs in once with the token and gets a session cookie
// (HttpOnly, SameSite=Strict) that admin() accepts for reads: the
// dashboard can look but not steer.
func (n *Node) uiRoutes(mux *http.ServeMux) {
	mux.HandleFunc("/ui", n.only(http.MethodGet, func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/ui/", http.StatusMovedPermanently)
	}))
	mux.HandleFunc("/ui/", n.only(http.MethodGet, n.uiPage))
	mux.HandleFunc("/ui/login", n.only(http.MethodPost, n.uiLogin))
	mux.HandleFunc("/ui/logout", n.only(http.MethodPost, func(w http.ResponseWriter, r *http.Request) {
		http.SetCookie(w, &http.Cookie{Name: uiCookie, Value: "", Path: "/", MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteStrictMode})
		http.Redirect(w, r, "/ui/", http.StatusSeeOther)
	}))
}

func uiHeaders(w http.ResponseWriter, contentType string) {
	h := w.Header()
	h["Content-Type"] = []string{contentType}
	h["Cache-Control"] = []string{"no-store"}
	h["X-Content-Type-Options"] = []string{"nosniff"}
	h["X-Frame-Options"] = []string{"DENY"}
	h["Referrer-Policy"] = []string{"no-referrer"}
	h["Content-Security-Policy"] = []string{"default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"}
}

// uiTypes are the files /ui/ serves, with their content types.
var uiTypes = map[string]string{
	"": "text/html; charset=utf-8", "index.html": "text/html; charset=utf-8",
	"app.js": "text/javascript; charset=utf-8", "app.css": "text/css; charset=utf-8",
}

func (n *Node) uiPage(w http.ResponseWriter, r *http.Request) {
	name := strings.TrimPrefix(r.URL.Path, "/ui/")
	ct, ok := uiTypes[name]
	if !ok {
		http.NotFound(w, r)
		return
	}
	if name == "" {
		name = "index.html"
	}
	token := n.s.AdminToken.Reveal()
	// The style sheet is also the sign-in form's.
	if name != "app.css" && !n.uiAllowed(r, token) {
		if token == "" {
			uiHeaders(w, "text/plain; charset=utf-8")
			w.WriteHeader(http.StatusForbidden)
			_, _ = w.Write([]byte(errAdminRemote.Error() + "\n"))
			return
		}
		n.uiLoginForm(w, http.StatusOK, "")
		return
	}
	b, err := uiFiles.ReadFile("ui/" + name)
	if err != nil {
		http.NotFound(w, r)
		return
	}
	if name == "index.html" && token != "" {
		b = []byte(strings.Replace(string(b), `id="logout-form" hidden`, `id="logout-form"`, 1))
	}
	uiHeaders(w, ct)
	_, _ = w.Write(b)
}

func (n *Node) uiLoginForm(w http.ResponseWriter, status int, message string) {
	b, _ := uiFiles.ReadFile("ui/login.html")
	uiHeaders(w, "text/html; charset=utf-8")
	w.WriteHeader(status)
	// message is one of this file's constants: nothing from the request.
	_, _ = w.Write([]byte(strings.Replace(string(b), "{{message}}", message, 1)))
}

// uiLogin serves POST /ui/login (a form with the admin token): a right
// token gets a session cookie and goes to the dashboard.
func (n *Node) uiLogin(w http.ResponseWriter, r *http.Request) {
	token := n.s.AdminToken.Reveal()
	if token == "" {
		http.Redirect(w, r, "/ui/", http.StatusSeeOther)
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 4<<10)
	if err := r.ParseForm(); err != nil {
		n.uiLoginForm(w, http.StatusBadRequest, "The form could not be read.")
		return
	}
	got := r.PostForm.Get("token")
	if subtle.ConstantTimeCompare([]byte(got), []byte(token)) != 1 {
		n.log.Warn("dashboard sign-in refused: wrong admin token", "remote", r.RemoteAddr)
		n.uiLoginForm(w, http.StatusUnauthorized, "That is not this node's admin token.")
		return
	}
	exp := time.Now().Add(uiSessionFor)
	http.SetCookie(w, &http.Cookie{
		Name: uiCookie, Value: uiSession(token, exp), Path: "/", Expires: exp,
		HttpOnly: true, Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode,
	})
	http.Redirect(w, r, "/ui/", http.StatusSeeOther)
}

// uiSession is a session cookie's value: its expiry and an HMAC of it
// keyed by the admin token. The node keeps no session state; changing
// the token ends every session.
func uiSession(token string, exp time.Time) string {
	e := strconv.FormatInt(exp.Unix(), 10)
	mac := hmac.New(sha256.New, []byte(token))
	mac.Write([]byte("llmesh-ui-v1|" + e))
	return e + "." + hex.EncodeToString(mac.Sum(nil))
}

// uiSessionValid reports whether r carries an unexpired session cookie
// made with token.
func uiSessionValid(r *http.Request, token string) bool {
	c, err := r.Cookie(uiCookie)
	if err != nil || token == "" {
		return false
	}
	e, _, ok := strings.Cut(c.Value, ".")
	if !ok {
		return false
	}
	unix, err := strconv.ParseInt(e, 10, 64)
	if err != nil || time.Now().Unix() >= unix {
		return false
	}
	return hmac.Equal([]byte(c.Value), []byte(uiSession(token, time.Unix(unix, 0))))
}

// uiAllowed reports whether r may read the dashboard.
func (n *Node) uiAllowed(r *http.Request, token string) bool {
	if token == "" {
		return fromLoopback(r) && browserGuard(r) == nil
	}
	return uiSessionValid(r, token)
}
