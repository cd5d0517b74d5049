// Package ui is the node's dashboard: static files embedded in the
// binary, served at /ui/, with a sign-in that turns the admin token into
// a session cookie. The dashboard reads the admin API from the browser,
// so it shows what `llmesh status`, `members`, `providers` and `budgets`
// show, and needs no build step.
//
// Without an admin token the dashboard, like the admin API, answers
// loopback clients only. With one, a browser signs in once with the
// token and gets a session cookie (HttpOnly, SameSite=Strict) that the
// admin API accepts for reads (SessionValid): the dashboard can look but
// not steer. It draws the mesh map and charts as SVG from the series
// every node keeps (GET /v1/mesh/observe), with no library.
//
// The package imports no project package.
package ui

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"embed"
	"encoding/hex"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"
)

//go:embed index.html login.html app.js mesh.js spend.js app.css
var files embed.FS

const (
	cookie     = "llmesh_ui"
	sessionFor = 12 * time.Hour
)

// Config is what the dashboard needs of its node.
type Config struct {
	// Token is the node's admin token; "" when it has none.
	Token string
	// Local reports whether r may read the dashboard without a token:
	// the admin API's rule for a node without one (a loopback client, not
	// a cross-site request).
	Local func(r *http.Request) bool
	// Refusal is what a client Local refuses is told.
	Refusal string
	// Only wraps each handler in the node's check of the method (and
	// its write deadline).
	Only func(method string, h http.HandlerFunc) http.HandlerFunc
	// Log hears of refused sign-ins.
	Log *slog.Logger
}

// Dashboard serves /ui/.
type Dashboard struct{ cfg Config }

// New returns the dashboard of cfg.
func New(cfg Config) *Dashboard { return &Dashboard{cfg: cfg} }

// Routes serves GET /ui/ and its sign-in on mux.
func (d *Dashboard) Routes(mux *http.ServeMux) {
	only := d.cfg.Only
	mux.HandleFunc("/ui", only(http.MethodGet, func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/ui/", http.StatusMovedPermanently)
	}))
	mux.HandleFunc("/ui/", only(http.MethodGet, d.page))
	mux.HandleFunc("/ui/login", only(http.MethodPost, d.login))
	mux.HandleFunc("/ui/logout", only(http.MethodPost, func(w http.ResponseWriter, r *http.Request) {
		http.SetCookie(w, &http.Cookie{Name: cookie, Value: "", Path: "/", MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteStrictMode})
		http.Redirect(w, r, "/ui/", http.StatusSeeOther)
	}))
}

func headers(w http.ResponseWriter, contentType string) {
	h := w.Header()
	h["Content-Type"] = []string{contentType}
	h["Cache-Control"] = []string{"no-store"}
	h["X-Content-Type-Options"] = []string{"nosniff"}
	h["X-Frame-Options"] = []string{"DENY"}
	h["Referrer-Policy"] = []string{"no-referrer"}
	h["Content-Security-Policy"] = []string{"default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"}
}

// contentType is the content type of each file /ui/ serves.
func contentType(name string) (string, bool) {
	switch name {
	case "", "index.html":
		return "text/html; charset=utf-8", true
	case "app.js", "mesh.js", "spend.js":
		return "text/javascript; charset=utf-8", true
	case "app.css":
		return "text/css; charset=utf-8", true
	}
	return "", false
}

func (d *Dashboard) page(w http.ResponseWriter, r *http.Request) {
	name := strings.TrimPrefix(r.URL.Path, "/ui/")
	ct, ok := contentType(name)
	if !ok {
		http.NotFound(w, r)
		return
	}
	if name == "" {
		name = "index.html"
	}
	token := d.cfg.Token
	// The style sheet is also the sign-in form's.
	if name != "app.css" && !d.allowed(r) {
		if token == "" {
			headers(w, "text/plain; charset=utf-8")
			w.WriteHeader(http.StatusForbidden)
			_, _ = w.Write([]byte(d.cfg.Refusal + "\n"))
			return
		}
		loginForm(w, http.StatusOK, "")
		return
	}
	b, err := files.ReadFile(name)
	if err != nil {
		http.NotFound(w, r)
		return
	}
	if name == "index.html" && token != "" {
		b = []byte(strings.Replace(string(b), `id="logout-form" hidden`, `id="logout-form"`, 1))
	}
	headers(w, ct)
	_, _ = w.Write(b)
}

func loginForm(w http.ResponseWriter, status int, message string) {
	b, _ := files.ReadFile("login.html")
	headers(w, "text/html; charset=utf-8")
	w.WriteHeader(status)
	// message is one of this file's constants: nothing from the request.
	_, _ = w.Write([]byte(strings.Replace(string(b), "{{message}}", message, 1)))
}

// login serves POST /ui/login (a form with the admin token): a right
// token gets a session cookie and goes to the dashboard.
func (d *Dashboard) login(w http.ResponseWriter, r *http.Request) {
	token := d.cfg.Token
	if token == "" {
		http.Redirect(w, r, "/ui/", http.StatusSeeOther)
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 4<<10)
	if err := r.ParseForm(); err != nil {
		loginForm(w, http.StatusBadRequest, "The form could not be read.")
		return
	}
	got := r.PostForm.Get("token")
	if subtle.ConstantTimeCompare([]byte(got), []byte(token)) != 1 {
		d.cfg.Log.Warn("dashboard sign-in refused: wrong admin token", "remote", r.RemoteAddr)
		loginForm(w, http.StatusUnauthorized, "That is not this node's admin token.")
		return
	}
	exp := time.Now().Add(sessionFor)
	http.SetCookie(w, &http.Cookie{
		Name: cookie, Value: session(token, exp), Path: "/", Expires: exp,
		HttpOnly: true, Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode,
	})
	http.Redirect(w, r, "/ui/", http.StatusSeeOther)
}

// session is a session cookie's value: its expiry and an HMAC of it
// keyed by the admin token. The node keeps no session state; changing
// the token ends every session.
func session(token string, exp time.Time) string {
	e := strconv.FormatInt(exp.Unix(), 10)
	mac := hmac.New(sha256.New, []byte(token))
	mac.Write([]byte("llmesh-ui-v1|" + e))
	return e + "." + hex.EncodeToString(mac.Sum(nil))
}

// SessionValid reports whether r carries an unexpired session cookie
// made with token.
func SessionValid(r *http.Request, token string) bool {
	c, err := r.Cookie(cookie)
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
	return hmac.Equal([]byte(c.Value), []byte(session(token, time.Unix(unix, 0))))
}

// allowed reports whether r may read the dashboard.
func (d *Dashboard) allowed(r *http.Request) bool {
	if d.cfg.Token == "" {
		return d.cfg.Local(r)
	}
	return SessionValid(r, d.cfg.Token)
}
