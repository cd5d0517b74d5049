package emulator

import (
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/llmesh/llmesh/route"
)

// maxBodyBytes caps a request body; larger ones get 413.
const maxBodyBytes = 8 << 20

// endpoint is an API path the emulator serves.
type endpoint int

const (
	epUnknown          endpoint = iota
	epChat                      // POST /v1/chat/completions
	epAzureChat                 // POST /openai/deployments/{deployment}/chat/completions
	epModels                    // GET /v1/models
	epModel                     // GET /v1/models/{id}
	epEmbeddings                // POST /v1/embeddings
	epAzureEmbeddings           // POST /openai/deployments/{deployment}/embeddings
	epCompletions               // POST /v1/completions
	epAzureCompletions          // POST /openai/deployments/{deployment}/completions
	epMessages                  // POST /v1/messages (Anthropic)
	epCountTokens               // POST /v1/messages/count_tokens (Anthropic)
	epResponses                 // POST /v1/responses
	epResponse                  // GET or DELETE /v1/responses/{id}
	epResponseCancel            // POST /v1/responses/{id}/cancel
)

// azureSuffixes maps what follows an Azure deployment's name to its endpoint.
var azureSuffixes = [...]struct {
	suffix string
	ep     endpoint
}{
	{"/chat/completions", epAzureChat},
	{"/embeddings", epAzureEmbeddings},
	{"/completions", epAzureCompletions},
}

// classify names the endpoint of path and its path parameter: the
// deployment of an Azure path, the id of a model or a response.
func classify(path string) (endpoint, string) {
	switch path {
	case "/v1/chat/completions":
		return epChat, ""
	case "/v1/models":
		return epModels, ""
	case "/v1/embeddings":
		return epEmbeddings, ""
	case "/v1/completions":
		return epCompletions, ""
	case "/v1/messages":
		return epMessages, ""
	case "/v1/messages/count_tokens":
		return epCountTokens, ""
	case "/v1/responses":
		return epResponses, ""
	}
	if id, ok := strings.CutPrefix(path, "/v1/models/"); ok && id != "" {
		return epModel, id // model ids may hold slashes ("org/model")
	}
	if rest, ok := strings.CutPrefix(path, "/v1/responses/"); ok {
		if id, ok := strings.CutSuffix(rest, "/cancel"); ok && validParam(id) {
			return epResponseCancel, id
		}
		if validParam(rest) {
			return epResponse, rest
		}
	}
	if rest, ok := strings.CutPrefix(path, "/openai/v1/responses"); ok {
		// Azure's v1 Responses API, which names the deployment in model.
		return classify("/v1/responses" + rest)
	}
	if rest, ok := strings.CutPrefix(path, "/openai/deployments/"); ok {
		for _, a := range azureSuffixes {
			if dep, ok := strings.CutSuffix(rest, a.suffix); ok && validParam(dep) {
				return a.ep, dep
			}
		}
	}
	return epUnknown, ""
}

func validParam(s string) bool { return s != "" && !strings.Contains(s, "/") }

// azure reports whether ep is an Azure deployment path.
func (ep endpoint) azure() bool {
	return ep == epAzureChat || ep == epAzureEmbeddings || ep == epAzureCompletions
}

// anthropic reports whether ep speaks Anthropic's API (and its errors).
func (ep endpoint) anthropic() bool { return ep == epMessages || ep == epCountTokens }

// methods lists the methods ep accepts, the first the one named in 405s.
func (ep endpoint) methods() []string {
	switch ep {
	case epModels, epModel:
		return []string{http.MethodGet}
	case epResponse:
		return []string{http.MethodGet, http.MethodDelete}
	}
	return []string{http.MethodPost}
}

// exchange is one API request being answered.
type exchange struct {
	e       *Emulator
	w       http.ResponseWriter
	r       *http.Request
	cfg     *Config // as it was when the request arrived
	seq     uint64  // the request's number, from 1, in order of arrival
	arrived time.Time
	pace    pacer
	ep      endpoint
	param   string        // the deployment, model id or response id of the path
	eng     *engineRunner // the engine when the request arrived; nil without one
	run     *engineRun    // the request in eng, once generating
}

func (e *Emulator) serveHTTP(w http.ResponseWriter, r *http.Request) {
	if strings.HasPrefix(r.URL.Path, "/emulator/") {
		e.serveControl(w, r)
		return
	}
	if e.Mode() == ModeRefuse {
		// Only without a listener of its own (or while switching): the
		// nearest thing to a refused connection.
		panic(http.ErrAbortHandler)
	}
	if r.URL.Path == "/metrics" {
		e.serveMetrics(w, r)
		return
	}
	x := &exchange{e: e, w: w, r: r, cfg: e.cfg.Load(), eng: e.cur.Load(), arrived: time.Now()}
	x.ep, x.param = classify(r.URL.Path)
	x.pace = pacer{ctx: r.Context(), killed: e.killed}
	defer x.pace.stop()
	defer func() {
		if x.run != nil {
			x.run.release() // a client gone, or an answer cut: its slot and blocks go back
		}
	}()

	body, readErr := readBody(w, r)
	seq, ok := e.rec.enter(r, body)
	if !ok {
		x.fail(&apiError{status: http.StatusServiceUnavailable, message: "The emulator is shutting down.", typ: "server_error"})
		return
	}
	defer e.rec.exit()
	x.seq = seq

	if e.Mode() == ModeHang {
		select {
		case <-r.Context().Done():
			return
		case <-e.stopping:
			panic(http.ErrAbortHandler)
		}
	}
	if !x.pace.until(x.arrived.Add(x.cfg.Latency)) {
		return
	}
	if e.Mode() == ModeError {
		x.fail(&apiError{status: http.StatusServiceUnavailable, message: "The engine is currently overloaded, please try again later.", typ: "server_error"})
		return
	}
	if readErr != nil {
		x.fail(readErr)
		return
	}
	if x.check() {
		x.dispatch(body)
	}
}

// check answers the request with an error, and returns false, when its
// path, method, key or api-version is wrong.
func (x *exchange) check() bool {
	ep, r := x.ep, x.r
	methods := ep.methods()
	switch {
	case ep == epUnknown, ep == epResponses && x.cfg.NoResponses, ep == epResponse && x.cfg.NoResponses, ep == epResponseCancel && x.cfg.NoResponses:
		x.fail(&apiError{status: http.StatusNotFound, message: "Invalid URL (" + r.Method + " " + r.URL.Path + ")", typ: "invalid_request_error"})
	case !slices.Contains(methods, r.Method):
		x.w.Header().Set("Allow", strings.Join(methods, ", "))
		x.fail(&apiError{status: http.StatusMethodNotAllowed, message: "Method " + r.Method + " is not allowed on " + r.URL.Path + "; use " + methods[0] + ".", typ: "invalid_request_error"})
	case !x.authorized():
		x.fail(&apiError{status: http.StatusUnauthorized, message: "Incorrect API key provided.", typ: "invalid_request_error", code: "invalid_api_key"})
	case ep.azure() && r.URL.Query().Get("api-version") == "":
		x.fail(invalidParam("api-version", "Missing required query parameter: api-version."))
	case ep.anthropic() && r.Header.Get("anthropic-version") == "":
		x.fail(invalidParam("anthropic-version", "anthropic-version: header is required"))
	default:
		return true
	}
	return false
}

// dispatch answers a request that passed check.
func (x *exchange) dispatch(body []byte) {
	if x.refusedByMode(body) {
		return
	}
	switch x.ep {
	case epModels:
		x.answerModels()
	case epModel:
		x.answerModel()
	case epChat, epAzureChat:
		x.chat(body, x.param, x.ep == epAzureChat)
	case epEmbeddings, epAzureEmbeddings:
		x.embeddings(body)
	case epCompletions, epAzureCompletions:
		x.legacyCompletion(body)
	case epMessages:
		x.messages(body)
	case epCountTokens:
		x.countTokens(body)
	case epResponses:
		x.responses(body)
	case epResponse:
		x.storedResponse()
	case epResponseCancel:
		x.cancelResponse()
	default:
		x.fail(&apiError{status: http.StatusNotFound, message: "Invalid URL (" + x.r.Method + " " + x.r.URL.Path + ")", typ: "invalid_request_error"})
	}
}

// admit applies the RPM limit and reports whether the request may go on;
// when not it has been answered 429.
func (x *exchange) admit() bool {
	v := x.e.limit.take(time.Now())
	if v.limit == 0 {
		return true
	}
	h := x.w.Header()
	h.Set("x-ratelimit-limit-requests", strconv.Itoa(v.limit))
	h.Set("x-ratelimit-remaining-requests", strconv.Itoa(v.remaining))
	h.Set("x-ratelimit-reset-requests", resetString(v.reset))
	if v.ok {
		return true
	}
	retry := retryAfterSeconds(v.retry)
	h.Set("Retry-After", strconv.FormatInt(retry, 10))
	x.fail(&apiError{
		status:  http.StatusTooManyRequests,
		message: "Rate limit reached for requests per min (RPM): Limit " + strconv.Itoa(v.limit) + ". Please try again in " + strconv.FormatInt(retry, 10) + "s.",
		typ:     "requests",
		code:    "rate_limit_exceeded",
	})
	return false
}

// served reports whether model is served; when not the request has been
// answered 404.
func (x *exchange) served(model string) bool {
	if len(x.cfg.Models) == 0 || hasKey(x.cfg.Models, model) {
		return true
	}
	x.fail(&apiError{status: http.StatusNotFound, message: "The model `" + model + "` does not exist or you do not have access to it.", typ: "invalid_request_error", code: "model_not_found"})
	return false
}

// unlucky draws the request's error-rate failure and, when it fails,
// answers 500.
func (x *exchange) unlucky() bool {
	cfg := x.cfg
	if cfg.ErrorRate > 0 && float64(draw(cfg.Seed, x.seq, saltError)>>11)/(1<<53) < cfg.ErrorRate {
		x.fail(&apiError{status: http.StatusInternalServerError, message: "The server had an error while processing your request. Sorry about that!", typ: "server_error"})
		return true
	}
	return false
}

// model is the model a request reports: the deployment's on Azure paths,
// else the body's.
func (x *exchange) model(body string) string {
	if x.ep.azure() {
		return x.cfg.deploymentModel(x.param)
	}
	return body
}

// readBody reads the body whole, refusing more than maxBodyBytes.
func readBody(w http.ResponseWriter, r *http.Request) ([]byte, *apiError) {
	if r.ContentLength > maxBodyBytes {
		return nil, tooLarge()
	}
	buf := bytes.NewBuffer(make([]byte, 0, max(512, r.ContentLength+1)))
	_, err := buf.ReadFrom(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		return nil, tooLarge()
	case err != nil:
		return nil, invalidParam("", "The request body could not be read: "+err.Error())
	}
	return buf.Bytes(), nil
}

func tooLarge() *apiError {
	return &apiError{status: http.StatusRequestEntityTooLarge, message: "The request body exceeds " + strconv.Itoa(maxBodyBytes) + " bytes.", typ: "invalid_request_error", code: "request_too_large"}
}

func invalidParam(param, msg string) *apiError {
	return &apiError{status: http.StatusBadRequest, message: msg, typ: "invalid_request_error", param: param}
}

// authorized checks the API key: the api-key header on Azure paths,
// x-api-key or a bearer token on Anthropic's, a bearer token elsewhere.
func (x *exchange) authorized() bool {
	if x.cfg.APIKey == "" {
		return true
	}
	h := x.r.Header
	bearer, _ := strings.CutPrefix(h.Get("Authorization"), "Bearer ")
	got := bearer
	switch {
	case x.ep.azure(), strings.HasPrefix(x.r.URL.Path, "/openai/"):
		got = h.Get("api-key")
	case x.ep.anthropic() && h.Get("x-api-key") != "":
		got = h.Get("x-api-key")
	}
	return subtle.ConstantTimeCompare([]byte(got), []byte(x.cfg.APIKey)) == 1
}

// fail answers an API request with an error.
func (x *exchange) fail(err *apiError) {
	if x.ep.anthropic() {
		x.answer(err.status, "application/json", err.appendAnthropicJSON(nil))
		return
	}
	x.answer(err.status, "application/json", err.appendJSON(nil))
}

// answerOK writes a whole 200 JSON answer, or in ModeCut its headers and
// then the connection's end.
func (x *exchange) answerOK(body []byte) {
	if x.e.Mode() == ModeCut {
		h := x.w.Header()
		h.Set("Content-Type", "application/json")
		h.Set("Content-Length", strconv.Itoa(len(body)))
		x.w.WriteHeader(http.StatusOK)
		_ = http.NewResponseController(x.w).Flush()
		x.e.rec.answered(http.StatusOK)
		panic(http.ErrAbortHandler) // the client sees the headers, then the connection end
	}
	x.answer(http.StatusOK, "application/json", body)
}

// answer writes a whole answer and counts it.
func (x *exchange) answer(status int, contentType string, body []byte) {
	h := x.w.Header()
	h.Set("Content-Type", contentType)
	h.Set("Content-Length", strconv.Itoa(len(body)))
	x.w.WriteHeader(status)
	_, _ = x.w.Write(body) // a client gone is no concern of ours
	x.e.rec.answered(status)
}

// modelsCreated is the creation time listed for every model.
const modelsCreated = 1700000000

// answerModels lists the models in Models and those deployments report.
func (x *exchange) answerModels() {
	b := []byte(`{"object":"list","data":[`)
	for i, name := range x.cfg.modelNames() {
		if i > 0 {
			b = append(b, ',')
		}
		b = x.appendModel(b, name)
	}
	x.answer(http.StatusOK, "application/json", append(b, "]}"...))
}

// answerModel answers GET /v1/models/{id}: any model when Models is empty,
// else those answerModels lists.
func (x *exchange) answerModel() {
	id := x.param
	if len(x.cfg.Models) > 0 && !slices.Contains(x.cfg.modelNames(), id) {
		x.fail(&apiError{status: http.StatusNotFound, message: "The model '" + id + "' does not exist", typ: "invalid_request_error", param: "model", code: "model_not_found"})
		return
	}
	x.answer(http.StatusOK, "application/json", x.appendModel(nil, id))
}

// appendModel appends the model object of name.
func (x *exchange) appendModel(b []byte, name string) []byte {
	b = append(b, `{"id":`...)
	b = appendString(b, name)
	b = append(b, `,"object":"model","created":`...)
	b = strconv.AppendInt(b, modelsCreated, 10)
	b = append(b, `,"owned_by":`...)
	b = appendString(b, x.cfg.Name)
	return append(b, '}')
}

// pacer waits for deadlines with one timer, giving up when the request's
// context ends or Shutdown stops waiting.
type pacer struct {
	ctx    context.Context
	killed <-chan struct{}
	t      *time.Timer
}

// until waits for at and reports whether the request should go on: false
// once its client has gone. When Shutdown cuts requests it aborts the
// connection (panics with http.ErrAbortHandler), so that a cut stream ends
// broken rather than clean.
func (p *pacer) until(at time.Time) bool {
	var timer <-chan time.Time // nil: do not wait
	if d := time.Until(at); d > 0 {
		if p.t == nil {
			p.t = time.NewTimer(d)
		} else {
			p.t.Reset(d)
		}
		timer = p.t.C
	}
	select {
	case <-p.ctx.Done():
		return false
	case <-p.killed:
		panic(http.ErrAbortHandler)
	default:
	}
	if timer == nil {
		return true
	}
	select {
	case <-timer:
		return true
	case <-p.ctx.Done():
		return false
	case <-p.killed:
		panic(http.ErrAbortHandler)
	}
}

func (p *pacer) stop() {
	if p.t != nil {
		p.t.Stop()
	}
}

// serveControl serves POST /emulator/mode?m=MODE and GET /emulator/stats,
// which steer an emulator running in another process. They are not API
// requests: no key, no latency, no failure mode applies and they are not
// counted.
func (e *Emulator) serveControl(w http.ResponseWriter, r *http.Request) {
	var want string
	switch r.URL.Path {
	case "/emulator/mode":
		want = http.MethodPost
	case "/emulator/stats":
		want = http.MethodGet
	default:
		writeControl(w, http.StatusNotFound, map[string]string{"error": "no such control endpoint; use POST /emulator/mode?m=MODE or GET /emulator/stats"})
		return
	}
	if r.Method != want {
		w.Header().Set("Allow", want)
		writeControl(w, http.StatusMethodNotAllowed, map[string]string{"error": "use " + want})
		return
	}
	if want == http.MethodGet {
		writeControl(w, http.StatusOK, e.Stats())
		return
	}
	m, err := ParseMode(r.URL.Query().Get("m"))
	if err != nil {
		writeControl(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
		return
	}
	if m == ModeRefuse {
		e.refuseFromControl(w)
		return
	}
	if err := e.SetMode(m); err != nil {
		writeControl(w, http.StatusConflict, map[string]string{"error": err.Error()})
		return
	}
	writeControl(w, http.StatusOK, map[string]string{"mode": m.String()})
}

// refuseFromControl enters ModeRefuse for a control request, which must
// still get its answer although its connection is one of those refusing
// closes. It takes the connection over, refuses, and only then answers on
// it: a client that has the answer knows that new connections are refused.
func (e *Emulator) refuseFromControl(w http.ResponseWriter) {
	conn, rw, err := http.NewResponseController(w).Hijack()
	if err != nil { // HTTP/2, say: answer first and refuse after
		w.Header().Set("Connection", "close")
		writeControl(w, http.StatusOK, map[string]string{"mode": ModeRefuse.String()})
		_ = http.NewResponseController(w).Flush()
		_ = e.SetMode(ModeRefuse)
		return
	}
	defer conn.Close()
	status, doc := http.StatusOK, `{"mode":"refuse"}`
	if err := e.SetMode(ModeRefuse); err != nil {
		status, doc = http.StatusConflict, `{"error":`+string(appendString(nil, err.Error()))+`}`
	}
	_, _ = fmt.Fprintf(rw, "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s\n",
		status, http.StatusText(status), len(doc)+1, doc)
	_ = rw.Flush()
}

func writeControl(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"error":"encoding failed"}`)
	}
	b = append(b, '\n')
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(b))) // complete once flushed, even as the connection closes
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// parseChat decodes body with route.ParseChatRequest. Azure takes the model
// from the deployment and its clients may leave it out of the body, so an
// Azure body without one is read as if it named the deployment.
func parseChat(body []byte, azure bool, dep string) (*route.ChatRequest, *apiError) {
	req, err := route.ParseChatRequest(body)
	var ie *route.InvalidRequestError
	if err != nil && azure && errors.As(err, &ie) && ie.Param == "model" {
		if req2, err2 := route.ParseChatRequest(withModel(body, dep)); err2 == nil || !errors.As(err2, &ie) || ie.Param != "model" {
			req, err = req2, err2
		}
	}
	if err == nil {
		return req, nil
	}
	if errors.As(err, &ie) {
		return nil, invalidParam(ie.Param, ie.Error())
	}
	return nil, invalidParam("", err.Error())
}

// withModel returns the JSON object body with a model member put first.
func withModel(body []byte, model string) []byte {
	i := bytes.IndexByte(body, '{') + 1
	out := make([]byte, 0, len(body)+len(model)+16)
	out = append(out, body[:i]...)
	out = append(out, `"model":`...)
	out = appendString(out, model)
	if rest := bytes.TrimLeft(body[i:], " \t\r\n"); len(rest) > 0 && rest[0] != '}' {
		out = append(out, ',')
	}
	return append(out, body[i:]...)
}
