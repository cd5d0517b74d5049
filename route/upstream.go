package route

import (
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// ExecutorConfig bounds how the node talks to providers. Each phase of an
// attempt has its own timeout instead of one global timeout, which would
// either cut long streams or wait forever on a dead provider.
type ExecutorConfig struct {
	// NodeName answers X-LLMesh-Via for targets this node calls itself.
	NodeName string
	// MaxAttempts bounds the providers tried for one request before the
	// first byte reaches the client.
	MaxAttempts int
	// ConnectTimeout bounds the TCP (and TLS) handshake with a provider.
	ConnectTimeout time.Duration
	// FirstByteTimeout bounds the wait for a stream's first event.
	FirstByteTimeout time.Duration
	// ResponseTimeout bounds a non-streamed answer, which arrives whole
	// once the model has finished generating.
	ResponseTimeout time.Duration
	// StreamIdleTimeout bounds the gap between two events of a stream,
	// however long the stream runs.
	StreamIdleTimeout time.Duration
	// MaxStreamDuration bounds a whole stream, so that one that never
	// ends (a looping model, a hostile provider) ends with an error
	// event; 0 means no bound.
	MaxStreamDuration time.Duration
	// MaxResponseBytes caps a non-streamed answer; MaxEventBytes one
	// streamed event.
	MaxResponseBytes int64
	MaxEventBytes    int
	// IdleConnTimeout is how long a keep-alive connection to a provider
	// may idle before it is closed. MaxIdleConnsPerHost bounds how many
	// idle ones are kept per host when providers are called through
	// net/http's Transport (with an egress proxy); the node's own
	// transport keeps each until its idle timeout.
	MaxIdleConnsPerHost int
	IdleConnTimeout     time.Duration
	// UserAgent is sent to providers.
	UserAgent string
}

// DefaultExecutorConfig returns the settings a node runs with.
func DefaultExecutorConfig() ExecutorConfig {
	return ExecutorConfig{
		MaxAttempts:         3,
		ConnectTimeout:      5 * time.Second,
		FirstByteTimeout:    60 * time.Second,
		ResponseTimeout:     10 * time.Minute,
		StreamIdleTimeout:   60 * time.Second,
		MaxStreamDuration:   time.Hour,
		MaxResponseBytes:    32 << 20,
		MaxEventBytes:       1 << 20,
		MaxIdleConnsPerHost: 256,
		IdleConnTimeout:     90 * time.Second,
		UserAgent:           "llmesh",
	}
}

// newTransport returns net/http's pooled transport, which providers are
// called through when the environment names an egress proxy
// (HTTPS_PROXY), as operators behind one expect; see wireTransport.
func newTransport(cfg ExecutorConfig) *http.Transport {
	d := &net.Dialer{Timeout: cfg.ConnectTimeout, KeepAlive: 30 * time.Second}
	return &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           d.DialContext,
		ForceAttemptHTTP2:     true,
		TLSHandshakeTimeout:   cfg.ConnectTimeout,
		MaxIdleConns:          cfg.MaxIdleConnsPerHost * 4,
		MaxIdleConnsPerHost:   cfg.MaxIdleConnsPerHost,
		IdleConnTimeout:       cfg.IdleConnTimeout,
		ExpectContinueTimeout: time.Second,
		// Bodies are relayed as they are; a transparent gunzip would hide
		// the provider's framing and cost CPU for nothing.
		DisableCompression: true,
	}
}

// setAuth puts provider credentials on an upstream request.
func setAuth(h http.Header, p *Provider) {
	if p.authValue != nil {
		h[p.authName] = p.authValue
		return
	}
	if name, value := authHeader(p); value != nil {
		h[name] = value
	}
}

// authHeader is the header that carries p's key and its value; nil
// without a key. The value is shared by every request that sends it,
// and never written in place.
func authHeader(p *Provider) (string, []string) {
	if p.APIKey == "" {
		return "", nil
	}
	switch p.Kind {
	case KindAzure:
		return "Api-Key", []string{p.APIKey.Reveal()}
	case KindAnthropic:
		return "X-Api-Key", []string{p.APIKey.Reveal()}
	}
	return "Authorization", []string{"Bearer " + p.APIKey.Reveal()}
}

// retryAfter reads how long a 429 asks to wait: Retry-After (seconds or an
// HTTP date), else OpenAI's x-ratelimit-reset-requests ("1s", "6m0s",
// "20ms"); 0 when the answer says nothing.
func retryAfter(h http.Header, now time.Time) time.Duration {
	if v := h.Get("Retry-After"); v != "" {
		if s, err := strconv.ParseFloat(v, 64); err == nil && s >= 0 {
			return time.Duration(s * float64(time.Second))
		}
		if t, err := http.ParseTime(v); err == nil {
			return max(t.Sub(now), 0)
		}
	}
	for _, k := range []string{"X-Ratelimit-Reset-Requests", "X-Ratelimit-Reset-Tokens"} {
		if d, err := time.ParseDuration(strings.TrimSpace(h.Get(k))); err == nil && d > 0 {
			return d
		}
	}
	return 0
}

// snippet reads at most n bytes of r for an error message and discards up
// to 64 KiB more, so a short error body leaves the connection reusable.
func snippet(r io.Reader, n int) string {
	b, _ := io.ReadAll(io.LimitReader(r, int64(n)))
	_, _ = io.CopyN(io.Discard, r, 64<<10)
	return strings.Join(strings.Fields(string(b)), " ")
}
