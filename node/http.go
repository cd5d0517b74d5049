package node

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/pprof"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/llmesh/llmesh/node/tenant"
	"github.com/llmesh/llmesh/route"
)

// routes returns the node's HTTP API.
func (n *Node) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/chat/completions", n.only(http.MethodPost, n.api(route.APIChat)))
	mux.HandleFunc("/v1/embeddings", n.only(http.MethodPost, n.api(route.APIEmbeddings)))
	mux.HandleFunc("/v1/completions", n.only(http.MethodPost, n.api(route.APICompletions)))
	mux.HandleFunc("/v1/responses", n.only(http.MethodPost, n.api(route.APIResponses)))
	mux.HandleFunc("/v1/responses/{id}", n.storedMethods)
	mux.HandleFunc("/v1/responses/{id}/cancel", n.only(http.MethodPost, n.storedHandler("cancel")))
	mux.HandleFunc("/v1/messages", n.only(http.MethodPost, n.messagesHandler))
	mux.HandleFunc("/v1/messages/count_tokens", n.only(http.MethodPost, n.countTokens))
	mux.HandleFunc("/v1/models", n.only(http.MethodGet, n.models))
	mux.HandleFunc("/v1/models/{id...}", n.only(http.MethodGet, n.model))
	mux.HandleFunc("/healthz", n.only(http.MethodGet, func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok", "node": n.s.Name})
	}))
	mux.HandleFunc("/readyz", n.only(http.MethodGet, n.readyz))
	scrape := promhttp.HandlerFor(n.reg, promhttp.HandlerOpts{Registry: n.reg})
	mux.HandleFunc("/metrics", n.only(http.MethodGet, scrape.ServeHTTP))
	mux.HandleFunc("/v1/mesh/members", n.only(http.MethodGet, n.admin(n.members)))
	mux.HandleFunc("/v1/mesh/providers", n.only(http.MethodGet, n.admin(n.providers)))
	mux.HandleFunc("/v1/mesh/join", n.only(http.MethodPost, n.admin(n.join)))
	mux.HandleFunc("/v1/mesh/budgets", n.only(http.MethodGet, n.admin(n.budgets)))
	mux.HandleFunc("/v1/mesh/budgets/{tenant}", n.only(http.MethodPut, n.admin(n.setBudget)))
	mux.HandleFunc("/v1/mesh/budgets/forfeit", n.only(http.MethodPost, n.admin(n.forfeit)))
	mux.HandleFunc("/v1/mesh/spend", n.only(http.MethodGet, n.admin(n.spendHandler)))
	mux.HandleFunc("/v1/mesh/shares", n.only(http.MethodGet, n.admin(n.shares)))
	mux.HandleFunc("/v1/mesh/raft/peers", n.only(http.MethodGet, n.admin(n.raftPeers)))
	mux.HandleFunc("/v1/mesh/status", n.only(http.MethodGet, n.admin(n.status)))
	mux.HandleFunc("/v1/mesh/drain", n.only(http.MethodPost, n.admin(n.drain)))
	mux.HandleFunc("/v1/mesh/leave", n.only(http.MethodPost, n.admin(n.drain)))
	mux.HandleFunc("/v1/mesh/tenants", n.only(http.MethodGet, n.admin(n.tenantsList)))
	mux.HandleFunc("/v1/mesh/tenants/{tenant}/keys", n.only(http.MethodPost, n.admin(n.addTenantKey)))
	mux.HandleFunc("/v1/mesh/tenants/{tenant}/revoke", n.only(http.MethodPost, n.admin(n.revokeTenantKeys)))
	n.keyRoutes(mux)
	mux.HandleFunc("/v1/mesh/decisions", n.only(http.MethodGet, n.admin(n.decisionsHandler)))
	mux.HandleFunc("/v1/mesh/series", n.only(http.MethodGet, n.admin(n.seriesHandler)))
	mux.HandleFunc("/v1/mesh/observe", n.only(http.MethodGet, n.admin(n.observeHandler)))
	mux.HandleFunc("/v1/route/explain", n.only(http.MethodPost, n.explain))
	n.uiRoutes(mux)
	// Go's profiles, for the operator: CPU, heap, allocations, goroutines,
	// mutex and block (see SetMutexProfileFraction). No write deadline: a
	// CPU profile or trace takes as long as asked.
	for path, h := range map[string]http.HandlerFunc{
		"/debug/pprof/": pprof.Index, "/debug/pprof/cmdline": pprof.Cmdline, "/debug/pprof/profile": pprof.Profile,
		"/debug/pprof/symbol": pprof.Symbol, "/debug/pprof/trace": pprof.Trace,
	} {
		admin := n.admin(h)
		mux.HandleFunc(path, func(w http.ResponseWriter, r *http.Request) {
			_ = http.NewResponseController(w).SetWriteDeadline(time.Time{})
			admin(w, r)
		})
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(n.s.ClientWrite))
		n.writeError(w, errNotFound)
	})
	return mux
}

// serverHeaderBytes is the http.Server's own bound on a request's
// headers: four times limits.max_header_bytes (at least 64 KiB more), so
// that headers over the configured limit reach headerLimit, which answers
// in the API's error shape. Only headers past this bound get net/http's
// plain-text 431.
func serverHeaderBytes(limit int) int {
	return max(4*limit, limit+64<<10)
}

// headerLimit refuses, with 431 in OpenAI's shape, a request whose
// headers (request line, names and values, as net/http counts them
// roughly) exceed limits.max_header_bytes.
func (n *Node) headerLimit(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		size := len(r.Method) + len(r.RequestURI) + len(r.Proto) + len(r.Host) + 4
		for k, vs := range r.Header {
			for _, v := range vs {
				size += len(k) + len(v) + 4
			}
		}
		if n.s.MaxHeaderBytes > 0 && size > n.s.MaxHeaderBytes {
			_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(n.s.ClientWrite))
			w.Header()["Connection"] = []string{"close"}
			n.writeError(w, fmt.Errorf("%w: %d bytes; this node takes at most %d (limits.max_header_bytes)", errHeaderLarge, size, n.s.MaxHeaderBytes))
			return
		}
		h.ServeHTTP(w, r)
	})
}

// errTooLarge is the refusal of a body over limits.max_body_bytes.
func (n *Node) errTooLarge() error {
	return fmt.Errorf("%w: this node takes at most %d bytes (limits.max_body_bytes)", errTooLarge, n.s.MaxBodyBytes)
}

// only answers 405 in OpenAI's shape to methods other than method. Every
// answer is written under a write deadline of its own (the server has no
// WriteTimeout, which would cut streams): a client that does not read is
// let go, and what an earlier request on the connection left does not
// fail this one. Streams move theirs forward as they flow (httpSink).
func (n *Node) only(method string, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		setWriteDeadline(w, time.Now().Add(n.s.ClientWrite))
		if r.Method != method && !(method == http.MethodGet && r.Method == http.MethodHead) {
			w.Header()["Allow"] = []string{method}
			n.writeError(w, errMethod)
			return
		}
		h(w, r)
	}
}

// setWriteDeadline is http.ResponseController's SetWriteDeadline
// without allocating the controller, for the server's own writer.
func setWriteDeadline(w http.ResponseWriter, t time.Time) {
	if d, ok := w.(interface{ SetWriteDeadline(time.Time) error }); ok {
		_ = d.SetWriteDeadline(t)
		return
	}
	_ = http.NewResponseController(w).SetWriteDeadline(t)
}

func (n *Node) readyz(w http.ResponseWriter, r *http.Request) {
	if !n.Ready() {
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "not ready", "node": n.s.Name})
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready", "node": n.s.Name})
}

// modelInfo is one model in GET /v1/models, in OpenAI's Model shape.
type modelInfo struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"` // when it became available at this node
	// OwnedBy names the providers serving it ("llmesh" for a group).
	OwnedBy string `json:"owned_by"`
}

// modelsFor lists the models and groups tenant t may use: those its key
// may ask for with at least one provider its residency allows.
func (n *Node) modelsFor(t *tenant.Tenant) []modelInfo {
	residency, _ := n.policyOf(t)
	rt := n.rt.Load()
	allowed := func(name string) []string {
		var by []string
		for _, o := range rt.catalog.Offers(name) {
			if residency.Allows(o.Provider.Jurisdictions) && !slices.Contains(by, o.Provider.Name) {
				by = append(by, o.Provider.Name)
			}
		}
		return by
	}
	out := []modelInfo{}
	for _, name := range rt.catalog.Names() {
		if !t.Allows(name) {
			continue
		}
		owners := allowed(name)
		if g := rt.catalog.Group(name); g != nil {
			for _, m := range g.Members {
				if len(allowed(m)) > 0 {
					owners = []string{"llmesh"}
				}
			}
		}
		if len(owners) > 0 {
			out = append(out, modelInfo{ID: name, Object: "model", Created: rt.since[name], OwnedBy: strings.Join(owners, ",")})
		}
	}
	return out
}

// models serves GET /v1/models: the models this tenant may use.
func (n *Node) models(w http.ResponseWriter, r *http.Request) {
	t, ok := n.tenants.Load().Authenticate(r)
	if !ok {
		n.writeError(w, errUnauthorized)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": n.modelsFor(t)})
}

// model serves GET /v1/models/{id}: one of them, or model_not_found
// (also for a model the tenant's residency allows no provider of).
func (n *Node) model(w http.ResponseWriter, r *http.Request) {
	t, ok := n.tenants.Load().Authenticate(r)
	if !ok {
		n.writeError(w, errUnauthorized)
		return
	}
	id := r.PathValue("id")
	for _, m := range n.modelsFor(t) {
		if m.ID == id {
			writeJSON(w, http.StatusOK, m)
			return
		}
	}
	n.writeError(w, fmt.Errorf("%w: %q is not served here for this tenant; GET /v1/models lists the models", route.ErrModelNotFound, id))
}

// api serves one of the OpenAI APIs (POST /v1/chat/completions,
// /v1/embeddings, /v1/completions) over the pipeline: the client's key authenticates the
// tenant, and the body is read once its tenant holds a place.
func (n *Node) api(api route.API) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) { n.clientRequest(api, w, r) }
}

func (n *Node) clientRequest(api route.API, w http.ResponseWriter, r *http.Request) {
	// One allocation for both: they live as long as the request.
	x := &struct {
		sink httpSink
		in   inbound
	}{sink: httpSink{w: w, rc: *http.NewResponseController(w), timeout: n.s.ClientWrite}}
	n.fillClientInbound(&x.in, api, w, &x.sink.rc, r, nil)
	n.serve(r.Context(), &x.in, &x.sink)
}

// clientInbound is the inbound of a client's request of api: its tenant (or
// why it has none), its request id and headers, and its body still to be
// read, through read when it is not nil (a body to translate).
func (n *Node) clientInbound(api route.API, w http.ResponseWriter, rc *http.ResponseController, r *http.Request, read func() ([]byte, error)) *inbound {
	in := new(inbound)
	n.fillClientInbound(in, api, w, rc, r, read)
	return in
}

// fillClientInbound sets in as clientInbound describes.
func (n *Node) fillClientInbound(in *inbound, api route.API, w http.ResponseWriter, rc *http.ResponseController, r *http.Request, read func() ([]byte, error)) {
	t, ok := n.tenants.Load().Authenticate(r)
	*in = inbound{origin: fromClient, api: api, tenant: t, id: requestID(r), start: n.now(), read: read,
		pending: true, client: clientBody{w: w, rc: rc, r: r},
		session: r.Header.Get("X-Llmesh-Session"), residency: r.Header.Get("X-Llmesh-Residency"),
		traceparent: r.Header.Get("Traceparent"), tracestate: r.Header.Get("Tracestate"), cache: r.Header.Get(cacheHeader),
		// (The canonical name: Values would allocate it, on every request.)
		tags: strings.Join(r.Header["X-Llmesh-Tags"], ","), trailers: acceptsTrailers(r.Header)}
	if !ok {
		in.authErr = errUnauthorized
	}
}

// acceptsTrailers reports whether a request's TE header takes trailers.
func acceptsTrailers(h http.Header) bool {
	for _, v := range h.Values("Te") {
		for t := range strings.SplitSeq(v, ",") {
			if name, _, _ := strings.Cut(t, ";"); strings.EqualFold(strings.TrimSpace(name), "trailers") {
				return true
			}
		}
	}
	return false
}

// requestID returns the client's X-Request-Id when it is a short printable
// token, else a new random one. It follows the request into the logs of
// every node it passes.
func requestID(r *http.Request) string {
	if id := r.Header.Get("X-Request-Id"); id != "" && len(id) <= 64 && asciiIn(id, '!', '~') {
		return id
	}
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// asciiIn reports whether every byte of s lies in [lo, hi].
func asciiIn(s string, lo, hi byte) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < lo || s[i] > hi {
			return false
		}
	}
	return true
}

// readBody reads the request body within the size limit and the body read
// timeout, so neither a huge nor a trickling body can hold the node.
//
// On failure nothing more is read: the body is closed under an expired
// read deadline, and the server answers at once and drops the
// connection. Closing it under a deadline still to come would have
// net/http read up to 256 KiB more first, past the limit, for as long as
// the deadline allows, before the refusal is sent.
func (n *Node) readBody(w http.ResponseWriter, rc *http.ResponseController, r *http.Request) ([]byte, error) {
	if r.ContentLength > n.s.MaxBodyBytes {
		n.refuseUnread(w, rc, r)
		return nil, n.errTooLarge()
	}
	// Deadlines are on the wall clock, whatever clock the node plans with.
	_ = rc.SetReadDeadline(time.Now().Add(n.s.ReadBody))
	var buf []byte
	if r.ContentLength > 0 {
		// Sized by what is declared, up to 64 KiB: a client that declares
		// megabytes and sends nothing gets no megabytes held for it.
		buf = make([]byte, 0, min(r.ContentLength+1, 64<<10))
	}
	body, err := readAll(http.MaxBytesReader(w, r.Body, n.s.MaxBodyBytes), buf)
	if err != nil {
		_ = rc.SetReadDeadline(time.Now())
		_ = r.Body.Close()
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return nil, n.errTooLarge()
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return nil, &route.InvalidRequestError{Msg: fmt.Sprintf("could not read the request body: it did not arrive within %s", n.s.ReadBody)}
		}
		return nil, &route.InvalidRequestError{Msg: "could not read the request body: the connection failed"}
	}
	_ = rc.SetReadDeadline(time.Time{})
	return body, nil
}

// refuseUnread prepares the refusal of a request whose body the node does
// not read (no key, a declared length over the limit): the connection
// closes after the answer, and what net/http reads of the body after the
// answer, to let the client see it before the connection closes, is
// bounded by the body read timeout. Left as it is, net/http would read up
// to 256 KiB of the body before answering, without a deadline, for a
// client that may never send it. A request without a body keeps its
// connection.
func (n *Node) refuseUnread(w http.ResponseWriter, rc *http.ResponseController, r *http.Request) {
	if r.ContentLength == 0 {
		return
	}
	w.Header()["Connection"] = []string{"close"}
	_ = rc.SetReadDeadline(time.Now().Add(n.s.ReadBody))
}

func readAll(r io.Reader, b []byte) ([]byte, error) {
	if b == nil {
		b = make([]byte, 0, 4096)
	}
	for {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		k, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+k]
		if err == io.EOF {
			return b, nil
		}
		if err != nil {
			return b, err
		}
	}
}

// httpSink is a route.ResponseSink over the client's HTTP response. A
// client that stops reading is cut off after clientWrite, while a stream
// that keeps flowing runs as long as it needs: the write deadline moves
// forward as the stream flows. Moving it costs a runtime timer update, so
// it moves only when it has come within three quarters of the timeout —
// the cut-off lies between 3/4 and all of clientWrite after the last
// successful write.
type httpSink struct {
	w        http.ResponseWriter
	rc       http.ResponseController // in the sink's own allocation
	timeout  time.Duration
	status   int
	deadline time.Time
}

func (s *httpSink) Header() http.Header { return s.w.Header() }

func (s *httpSink) written() int { return s.status }

func (s *httpSink) WriteHeader(status int) {
	s.status = status
	s.w.WriteHeader(status)
}

func (s *httpSink) extend() {
	now := time.Now()
	if s.deadline.Sub(now) < s.timeout*3/4 {
		s.deadline = now.Add(s.timeout)
		_ = s.rc.SetWriteDeadline(s.deadline)
	}
}

func (s *httpSink) Write(p []byte) (int, error) {
	s.extend()
	return s.w.Write(p)
}

func (s *httpSink) Flush() error {
	s.extend()
	return s.rc.Flush()
}
