package node

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"strconv"

	"github.com/llmesh/llmesh/consensus"
	"github.com/llmesh/llmesh/node/decisions"
	"github.com/llmesh/llmesh/route"
)

// Errors of the HTTP layer itself; route's sentinels cover the rest.
var (
	errUnauthorized = errors.New("missing or unknown API key: send Authorization: Bearer KEY")
	errTooLarge     = errors.New("request body too large")
	errHeaderLarge  = errors.New("request headers too large")
	errNotFound     = errors.New("no such endpoint")
	errMethod       = errors.New("method not allowed")
)

// apiError is OpenAI's error object.
type apiError struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    string  `json:"code"`
}

// statusClientClosed is recorded (never sent) when the client went away.
const statusClientClosed = decisions.StatusClientClosed

// classify maps an error of the request path to its HTTP status and
// OpenAI error, the one place where that mapping is made. The message is
// err's own: what is answered or shown goes through Node.classify, which
// redacts it.
func classify(err error) (int, apiError) {
	e := apiError{Message: err.Error()}
	var inv *route.InvalidRequestError
	var ra *route.RetryAfterError
	var nf *notFoundError
	switch {
	case errors.As(err, &nf):
		e.Type, e.Code, e.Param = "invalid_request_error", nf.code, &nf.param
		return http.StatusNotFound, e
	case errors.As(err, &inv):
		e.Type, e.Code = "invalid_request_error", "invalid_request"
		if inv.Param != "" {
			e.Param = &inv.Param
		}
		return http.StatusBadRequest, e
	case errors.Is(err, errUnauthorized), errors.Is(err, errAdminToken):
		e.Type, e.Code = "invalid_request_error", "invalid_api_key"
		return http.StatusUnauthorized, e
	case errors.Is(err, errModelNotAllowed):
		param := "model"
		e.Type, e.Code, e.Param = "invalid_request_error", "model_not_allowed", &param
		return http.StatusForbidden, e
	case errors.Is(err, errAdminRemote), errors.Is(err, errCrossSite):
		e.Type, e.Code = "permission_error", "admin_token_required"
		return http.StatusForbidden, e
	case errors.Is(err, consensus.ErrLedgerVersion):
		e.Type, e.Code = "invalid_request_error", "ledger_upgrade_required"
		return http.StatusConflict, e
	case errors.Is(err, errLedgerUnavailable):
		e.Type, e.Code = "server_error", "ledger_unavailable"
		return http.StatusServiceUnavailable, e
	case errors.Is(err, errNoGossip), errors.Is(err, errNoLedger):
		e.Type, e.Code = "invalid_request_error", "invalid_request"
		return http.StatusBadRequest, e
	case errors.Is(err, errTooLarge):
		e.Type, e.Code = "invalid_request_error", "request_too_large"
		return http.StatusRequestEntityTooLarge, e
	case errors.Is(err, errHeaderLarge):
		e.Type, e.Code = "invalid_request_error", "headers_too_large"
		return http.StatusRequestHeaderFieldsTooLarge, e
	case errors.Is(err, route.ErrModelNotFound):
		param := "model"
		e.Type, e.Code, e.Param = "invalid_request_error", "model_not_found", &param
		return http.StatusNotFound, e
	case errors.Is(err, errNotFound), errors.Is(err, errNoSuchTenant):
		e.Type, e.Code = "invalid_request_error", "not_found"
		return http.StatusNotFound, e
	case errors.Is(err, errMethod):
		e.Type, e.Code = "invalid_request_error", "method_not_allowed"
		return http.StatusMethodNotAllowed, e
	case errors.Is(err, route.ErrBudgetExceeded):
		e.Type, e.Code = "insufficient_quota", "budget_exceeded"
		return http.StatusPaymentRequired, e
	case errors.As(err, &ra) && ra.Lease:
		e.Type, e.Code = "server_error", "admission_timeout"
		return http.StatusServiceUnavailable, e
	case errors.As(err, &ra):
		e.Type, e.Code = "rate_limit_error", "rate_limited"
		return http.StatusTooManyRequests, e
	case errors.Is(err, route.ErrNoCompliantProvider):
		e.Type, e.Code = "server_error", "no_compliant_provider"
		return http.StatusServiceUnavailable, e
	case errors.Is(err, route.ErrNoProvider):
		e.Type, e.Code = "server_error", "no_provider_available"
		return http.StatusServiceUnavailable, e
	case errors.Is(err, route.ErrUpstream):
		e.Type, e.Code = "server_error", "upstream_error"
		return http.StatusBadGateway, e
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return statusClientClosed, e
	}
	e.Type, e.Code, e.Message = "server_error", "internal_error", "internal error"
	return http.StatusInternalServerError, e
}

// classify is the package's classify with the node's secrets redacted
// from the message.
func (n *Node) classify(err error) (int, apiError) {
	status, e := classify(err)
	e.Message = n.red.Redact(e.Message)
	return status, e
}

// writeError answers with err in OpenAI's shape and returns the status. A
// provider's own refusal of the request is relayed as it is.
func (n *Node) writeError(w http.ResponseWriter, err error) int {
	var reply *route.UpstreamReply
	if errors.As(err, &reply) {
		ct := reply.Header.Get("Content-Type")
		if ct == "" {
			ct = "application/json"
		}
		w.Header()["Content-Type"] = []string{ct}
		w.Header()["X-Llmesh-Provider"] = []string{reply.Provider}
		w.WriteHeader(reply.Status)
		_, _ = w.Write(reply.Body)
		return reply.Status
	}
	status, e := n.classify(err)
	if status == statusClientClosed {
		return status
	}
	var ra *route.RetryAfterError
	if errors.As(err, &ra) {
		w.Header()["Retry-After"] = []string{strconv.Itoa(int(math.Ceil(ra.After.Seconds())))}
	}
	writeJSON(w, status, errorDoc{e})
	return status
}

// errorDoc is an error in OpenAI's shape: {"error": {...}}.
type errorDoc struct {
	Error apiError `json:"error"`
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"error":{"message":"internal error","type":"server_error","param":null,"code":"internal_error"}}`)
	}
	w.Header()["Content-Type"] = []string{"application/json"}
	w.Header()["Content-Length"] = []string{strconv.Itoa(len(b) + 1)}
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// notFoundError is a request naming something (in param) that no node
// holds: OpenAI's 404 with its code.
type notFoundError struct{ param, code, msg string }

func (e *notFoundError) Error() string { return e.msg }
