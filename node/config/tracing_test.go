package config

import (
	"strings"
	"testing"

	"github.com/llmesh/llmesh/route"
)

func TestTracingSettings(t *testing.T) {
	with := func(extra string) string { return validConfig + "tracing:\n" + extra }
	testEnv["OTLP_HEADERS"] = "Authorization=Bearer collector-secret, X-Tenant = ops"
	defer delete(testEnv, "OTLP_HEADERS")
	c, err := Parse([]byte(with("  otlp_endpoint: http://127.0.0.1:4318\n  headers_env: OTLP_HEADERS\n  sample_ratio: 0.25\n")))
	if err != nil {
		t.Fatal(err)
	}
	s, err := Resolve(c, testEnvOf())
	if err != nil {
		t.Fatal(err)
	}
	tc := s.Tracing
	if tc.Endpoint != "http://127.0.0.1:4318/v1/traces" || tc.Ratio != 0.25 || tc.Service != "llmesh" ||
		tc.Headers["Authorization"].Reveal() != "Bearer collector-secret" || tc.Headers["X-Tenant"].Reveal() != "ops" {
		t.Fatalf("tracing settings %+v", tc)
	}
	for _, bad := range []struct{ extra, want string }{
		{"  otlp_endpoint: 127.0.0.1:4318\n", `tracing.otlp_endpoint: "127.0.0.1:4318" must be an http:// or https:// URL`},
		{"  otlp_endpoint: http://127.0.0.1:4318\n  sample_ratio: 2\n", "tracing.sample_ratio: must be between 0 and 1"},
		{"  otlp_endpoint: https://ops:hunter2@collector:4318\n", "tracing.otlp_endpoint: credentials belong in tracing.headers_env"},
		{"  otlp_endpoint: http://127.0.0.1:4318\n  headers_env: NOPE\n", "tracing.headers_env: environment variable NOPE is empty or unset"},
		{"  sample_ratio: 0.5\n", "tracing.otlp_endpoint: is required with the other tracing keys"},
		{"  otlp_endpint: http://x\n", "otlp_endpint"},
	} {
		c, err := Parse([]byte(with(bad.extra)))
		if err == nil {
			_, err = Resolve(c, testEnvOf())
		}
		if err == nil || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("%q: got %v, want %q", bad.extra, err, bad.want)
		}
	}
	testEnv["OTLP_HEADERS"] = "no-equals-sign-secret"
	c, _ = Parse([]byte(with("  otlp_endpoint: http://127.0.0.1:4318\n  headers_env: OTLP_HEADERS\n")))
	if _, err := Resolve(c, testEnvOf()); err == nil || strings.Contains(err.Error(), "no-equals-sign-secret") {
		t.Fatalf("bad headers: %v", err)
	}
}

func TestResolveTracing(t *testing.T) {
	half := 0.5
	testSection(t, resolveTracing, nil, []sectionCase{
		{name: "off", want: func(*Runtime) {}},
		{name: "on", edit: func(f *File) {
			f.Tracing = TracingSection{OTLPEndpoint: "https://collector:4318/", SampleRatio: &half, ServiceName: "mesh", HeadersEnv: "ADMIN"}
		}, err: "tracing.headers_env: environment variable ADMIN must hold key=value pairs separated by commas"},
		{name: "defaults", edit: func(f *File) { f.Tracing.OTLPEndpoint = "http://collector:4318/v1/traces" }, want: func(s *Runtime) {
			s.Tracing = &Tracing{Endpoint: "http://collector:4318/v1/traces", Headers: map[string]route.Secret{}, Ratio: 1, Service: "llmesh"}
		}},
		{name: "path added", edit: func(f *File) {
			f.Tracing = TracingSection{OTLPEndpoint: "http://c:4318", SampleRatio: &half, ServiceName: "mesh"}
		},
			want: func(s *Runtime) {
				s.Tracing = &Tracing{Endpoint: "http://c:4318/v1/traces", Headers: map[string]route.Secret{}, Ratio: 0.5, Service: "mesh"}
			}},
		{name: "env name", edit: func(f *File) { f.Tracing = TracingSection{OTLPEndpoint: "http://c:4318", HeadersEnv: "a-b"} },
			err: `tracing.headers_env: "a-b" is not an environment variable name`},
	})
}
