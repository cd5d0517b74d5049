package route

import (
	"errors"
	"fmt"
	"net/http"
	"time"
)

// Sentinel errors of the request path. Callers match them with errors.Is;
// node/ maps them to HTTP statuses and OpenAI error codes in one place.
var (
	ErrInvalidRequest      = errors.New("invalid request")
	ErrModelNotFound       = errors.New("model not found")
	ErrNoCompliantProvider = errors.New("no provider compliant with the request's residency")
	ErrNoProvider          = errors.New("no provider available")
	ErrRateLimited         = errors.New("rate limited")
	// ErrAdmissionTimeout is a request that waited limits.admission_wait
	// for what the mesh itself had not yet granted (budget escrow being
	// gathered, a rate share not yet renewed): not a limit anyone
	// configured, so not a 429.
	ErrAdmissionTimeout = errors.New("admission timed out")
	ErrBudgetExceeded   = errors.New("budget exceeded")
	ErrUpstream         = errors.New("upstream error")
)

// RetryAfterError is ErrRateLimited, or with Lease ErrAdmissionTimeout,
// with the time after which a retry may succeed.
type RetryAfterError struct {
	After time.Duration
	Msg   string
	// Transient means the refusal lapses by itself, within After: a rate
	// window moves on, a cooldown ends, a share is renewed. A request may
	// wait for it (within limits.admission_wait) instead of being
	// refused.
	Transient bool
	// Lease means what was missing is the mesh's own lease mechanics,
	// not a configured limit: escrow not yet gathered, a rate share not
	// yet granted or renewed, the node giving its escrow back. The
	// error matches ErrAdmissionTimeout instead of ErrRateLimited, and
	// node/ answers it 503 admission_timeout.
	Lease bool
}

func (e *RetryAfterError) Error() string {
	return fmt.Sprintf("%s (retry after %s)", e.Msg, e.After.Round(time.Millisecond))
}

func (e *RetryAfterError) Unwrap() error {
	if e.Lease {
		return ErrAdmissionTimeout
	}
	return ErrRateLimited
}

// UpstreamReply is an answer from a provider that the client must see as it
// is: the request itself was refused (400, 413, 422), so trying another
// provider would not help. Body is the provider's error document.
type UpstreamReply struct {
	Provider string
	Status   int
	Header   http.Header
	Body     []byte
}

func (e *UpstreamReply) Error() string {
	return fmt.Sprintf("provider %s refused the request: %d %s", e.Provider, e.Status, http.StatusText(e.Status))
}

// InvalidRequestError says what is wrong with a request and which parameter
// is at fault; it matches ErrInvalidRequest.
type InvalidRequestError struct {
	Param string // e.g. "messages[2].role"; empty when the body as a whole is bad
	Msg   string
}

func (e *InvalidRequestError) Error() string {
	if e.Param == "" {
		return e.Msg
	}
	return e.Param + ": " + e.Msg
}

func (e *InvalidRequestError) Unwrap() error { return ErrInvalidRequest }

func invalid(param, format string, args ...any) error {
	return &InvalidRequestError{Param: param, Msg: fmt.Sprintf(format, args...)}
}
