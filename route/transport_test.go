package route

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// countConns counts the connections srv accepts.
func countConns(srv *httptest.Server) *atomic.Int64 {
	var n atomic.Int64
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			n.Add(1)
		}
	}
	return &n
}

func wireFor(t *testing.T) *wireTransport {
	cfg := DefaultExecutorConfig()
	cfg.ConnectTimeout = 2 * time.Second
	w := &wireTransport{cfg: cfg}
	t.Cleanup(w.CloseIdleConnections)
	return w
}

func post(t *testing.T, rt http.RoundTripper, ctx context.Context, url, body string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header["Content-Type"] = []string{"application/json"}
	req.Header["X-Api-Key"] = []string{"k"}
	resp, err := rt.RoundTrip(req)
	if err != nil {
		t.Fatalf("round trip: %v", err)
	}
	return resp
}

// TestWireTransportRelaysAndReuses sends requests whole and streamed and
// checks what the provider got, what came back, and that one connection
// carried them all.
func TestWireTransportRelaysAndReuses(t *testing.T) {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if r.Method != http.MethodPost || r.URL.RequestURI() != "/v1/chat/completions?x=1" ||
			r.Header.Get("X-Api-Key") != "k" || r.Header.Get("Content-Type") != "application/json" || r.Host == "" {
			http.Error(w, fmt.Sprintf("%s %s %v", r.Method, r.URL, r.Header), http.StatusBadRequest)
			return
		}
		w.Header()["X-Ratelimit-Remaining-Requests"] = []string{"41"}
		w.Header().Add("Vary", "a")
		w.Header().Add("Vary", "b")
		if strings.Contains(string(b), "stream") {
			w.Header().Set("Content-Type", "text/event-stream")
			for i := range 3 {
				fmt.Fprintf(w, "data: {\"i\":%d}\n\n", i)
				w.(http.Flusher).Flush()
			}
			fmt.Fprint(w, "data: [DONE]\n\n")
			w.(http.Flusher).Flush()
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(append([]byte(`{"echo":`), b...))
	}))
	conns := countConns(srv)
	srv.Start()
	defer srv.Close()
	rt := wireFor(t)
	url := srv.URL + "/v1/chat/completions?x=1"
	for i := range 5 {
		resp := post(t, rt, context.Background(), url, fmt.Sprintf(`{"n":%d}`, i))
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 || string(b) != fmt.Sprintf(`{"echo":{"n":%d}`, i) {
			t.Fatalf("whole %d: %d %q %v", i, resp.StatusCode, b, err)
		}
		if resp.Header.Get("X-Ratelimit-Remaining-Requests") != "41" || strings.Join(resp.Header["Vary"], ",") != "a,b" ||
			resp.Header.Get("Content-Type") != "application/json" {
			t.Fatalf("header %v", resp.Header)
		}

		resp = post(t, rt, context.Background(), url, `{"stream":true}`)
		sc := bufio.NewScanner(resp.Body)
		events := 0
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "data: ") {
				events++
			}
			if sc.Text() == "data: [DONE]" {
				break
			}
		}
		// As the relay does after [DONE]: the body's end is on its way.
		if _, err := io.Copy(io.Discard, resp.Body); err != nil {
			t.Fatalf("stream %d: after [DONE]: %v", i, err)
		}
		resp.Body.Close()
		if events != 4 {
			t.Fatalf("stream %d: %d events", i, events)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Fatalf("%d connections for 10 requests in turn, want 1", n)
	}
}

// TestWireTransportSkipsClosedIdle: the provider closes idle connections
// sooner than the node would (uvicorn keeps them 5 s); a request after
// that goes out on a new connection, and none fails.
func TestWireTransportSkipsClosedIdle(t *testing.T) {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = io.WriteString(w, "ok")
	}))
	conns := countConns(srv)
	srv.Start()
	defer srv.Close()
	rt := wireFor(t)
	for i := range 3 {
		resp := post(t, rt, context.Background(), srv.URL, "{}")
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || string(b) != "ok" {
			t.Fatalf("request %d: %q %v", i, b, err)
		}
		srv.CloseClientConnections() // as an idle timeout would
	}
	if n := conns.Load(); n != 3 {
		t.Fatalf("%d connections, want 3", n)
	}
}

// TestWireTransportCancels: the request's context ends a wait for the
// answer's head and a read of its body at once, and the connection is
// not pooled.
func TestWireTransportCancels(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body) // and the server watches the connection
		if r.URL.Path == "/x" {
			return
		}
		if r.URL.Path == "/body" {
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = io.WriteString(w, "data: 1\n\n")
			w.(http.Flusher).Flush()
		}
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	conns := countConns(srv)
	srv.Start()
	defer srv.Close()
	rt := wireFor(t)

	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/head", strings.NewReader("{}"))
	start := time.Now()
	if _, err := rt.RoundTrip(req); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("head: %v, want the context's deadline", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("head: canceled after %v", d)
	}

	ctx2, cancel2 := context.WithCancel(context.Background())
	resp := post(t, rt, ctx2, srv.URL+"/body", "{}")
	buf := make([]byte, 64)
	if n, err := resp.Body.Read(buf); err != nil || string(buf[:n]) != "data: 1\n\n" {
		t.Fatalf("first event %q %v", buf[:n], err)
	}
	time.AfterFunc(50*time.Millisecond, cancel2)
	if _, err := resp.Body.Read(buf); err == nil {
		t.Fatal("a read went on after its context ended")
	}
	resp.Body.Close()
	resp.Body.Close() // a second Close does nothing

	resp = post(t, rt, context.Background(), srv.URL+"/x", "{}")
	_, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if n := conns.Load(); n != 3 {
		t.Fatalf("%d connections, want 3: a canceled one was pooled", n)
	}
}

// TestWireTransportTLS calls an https provider, handshake and all, whose
// answer's head is larger than an engine's read buffer, as a cloud API's
// behind its CDN can be.
func TestWireTransportTLS(t *testing.T) {
	big := strings.Repeat("x", 10<<10)
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Set-Cookie", big)
		_, _ = io.WriteString(w, r.Proto)
	}))
	defer srv.Close()
	rt := wireFor(t)
	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())
	rt.tlsConfig = &tls.Config{RootCAs: pool}
	resp := post(t, rt, context.Background(), srv.URL, "{}")
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 200 || string(b) != "HTTP/1.1" || resp.Header.Get("Set-Cookie") != big {
		t.Fatalf("%d %q %v", resp.StatusCode, b, err)
	}
}

// TestUpstreamTransportHonoursProxy: with an egress proxy in the
// environment, providers are called through net/http's transport, which
// sends through it; without, through the node's own.
func TestUpstreamTransportHonoursProxy(t *testing.T) {
	for _, k := range []string{"HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"} {
		t.Setenv(k, "")
	}
	if _, ok := newUpstreamTransport(DefaultExecutorConfig()).(*wireTransport); !ok {
		t.Fatal("no proxy set: want the node's own transport")
	}
	t.Setenv("HTTPS_PROXY", "http://127.0.0.1:3128")
	if _, ok := newUpstreamTransport(DefaultExecutorConfig()).(*http.Transport); !ok {
		t.Fatal("HTTPS_PROXY set: want net/http's transport")
	}
}
