package config

import (
	"math"
	"net/http"
	"net/url"
	"strings"

	"github.com/llmesh/llmesh/route"
)

// resolveTracing applies the tracing section; s.Tracing stays nil when
// it sets no endpoint.
func resolveTracing(c *File, env Env, s *Runtime, p *problems) {
	t := &c.Tracing
	if t.OTLPEndpoint == "" {
		if t.HeadersEnv != "" || t.SampleRatio != nil || t.ServiceName != "" {
			p.bad("tracing.otlp_endpoint", "is required with the other tracing keys")
		}
		return
	}
	tc := &Tracing{Endpoint: t.OTLPEndpoint, Ratio: 1, Service: "llmesh", Headers: map[string]route.Secret{}}
	if u, err := url.Parse(t.OTLPEndpoint); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		p.bad("tracing.otlp_endpoint", "%q must be an http:// or https:// URL such as http://127.0.0.1:4318/v1/traces", t.OTLPEndpoint)
	} else if u.User != nil {
		p.bad("tracing.otlp_endpoint", "credentials belong in tracing.headers_env, not in the URL")
	} else if u.Path == "" || u.Path == "/" {
		tc.Endpoint = strings.TrimSuffix(t.OTLPEndpoint, "/") + "/v1/traces"
	}
	if t.SampleRatio != nil {
		if r := *t.SampleRatio; r < 0 || r > 1 || math.IsNaN(r) {
			p.bad("tracing.sample_ratio", "must be between 0 and 1")
		} else {
			tc.Ratio = r
		}
	}
	if t.ServiceName != "" {
		tc.Service = t.ServiceName
	}
	s.Tracing = tc
	if t.HeadersEnv != "" {
		tc.Headers = tracingHeaders(t.HeadersEnv, env.Getenv, p)
	}
}

// tracingHeaders reads the collector's headers, "key=value,...", from the
// environment variable name.
func tracingHeaders(name string, getenv func(string) string, p *problems) map[string]route.Secret {
	headers := map[string]route.Secret{}
	if !envNamePattern.MatchString(name) {
		p.bad("tracing.headers_env", "%q is not an environment variable name", name)
		return headers
	}
	v := getenv(name)
	if v == "" {
		p.bad("tracing.headers_env", "environment variable %s is empty or unset", name)
		return headers
	}
	for pair := range strings.SplitSeq(v, ",") {
		k, val, ok := strings.Cut(strings.TrimSpace(pair), "=")
		if k = strings.TrimSpace(k); !ok || k == "" || strings.ContainsAny(k, " \t\r\n:") {
			// The value is a secret: the message names the variable only.
			p.bad("tracing.headers_env", "environment variable %s must hold key=value pairs separated by commas", name)
			break
		}
		headers[http.CanonicalHeaderKey(k)] = route.Secret(strings.TrimSpace(val))
	}
	return headers
}
