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

	"github.com/llmesh/llmesh/region"
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

// rawServer answers requests on raw TCP with answer(n, conn), n counting
// the requests it received from 1; answer returns false to close the
// connection.
// It returns its URL, the requests and the connections it received.
func rawServer(t *testing.T, answer func(n int64, c net.Conn) bool) (string, *atomic.Int64, *atomic.Int64) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var n, conns atomic.Int64
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					_, _ = io.Copy(io.Discard, req.Body)
					if !answer(n.Add(1), c) {
						return
					}
				}
			}()
		}
	}()
	return "http://" + ln.Addr().String(), &n, &conns
}

// TestWireTransportNeverResendsWritten: a request written whole to a
// reused connection that then fails is not sent again, as the provider
// may have processed it (and billed it); net/http's rule for a POST.
func TestWireTransportNeverResendsWritten(t *testing.T) {
	for name, bad := range map[string]func(net.Conn){
		"part of a head, then closed": func(c net.Conn) {
			_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n")
		},
		"closed without an answer": func(net.Conn) {},
	} {
		t.Run(name, func(t *testing.T) {
			url, n, _ := rawServer(t, func(n int64, c net.Conn) bool {
				if n == 2 {
					bad(c)
					return false
				}
				_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
				return true
			})
			rt := wireFor(t)
			resp := post(t, rt, context.Background(), url, "{}")
			_, _ = io.ReadAll(resp.Body)
			resp.Body.Close()
			req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(`{"bill":"me"}`))
			if resp, err := rt.RoundTrip(req); err == nil {
				resp.Body.Close()
				t.Fatal("the second request succeeded")
			}
			if got := n.Load(); got != 2 {
				t.Fatalf("the provider received %d requests for 2", got)
			}
		})
	}
}

// TestWireTransportSkipsManyClosedIdle: a burst leaves several idle
// connections, the provider closes them all (its keep-alive timeout), and
// the next request still goes out, on a new one.
func TestWireTransportSkipsManyClosedIdle(t *testing.T) {
	const burst = 8
	var arrived atomic.Int64
	gate := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if r.URL.Path == "/burst" {
			if arrived.Add(1) == burst {
				close(gate)
			}
			<-gate
		}
		_, _ = io.WriteString(w, "ok")
	}))
	defer srv.Close()
	rt := wireFor(t)
	errs := make(chan error, burst)
	for range burst {
		go func() {
			req, _ := http.NewRequest(http.MethodPost, srv.URL+"/burst", strings.NewReader("{}"))
			resp, err := rt.RoundTrip(req)
			if err == nil {
				_, err = io.ReadAll(resp.Body)
				resp.Body.Close()
			}
			errs <- err
		}()
	}
	for range burst {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	srv.CloseClientConnections()
	resp := post(t, rt, context.Background(), srv.URL+"/after", "{}")
	resp.Body.Close()
}

// TestWireTransportHeadAsNetHTTP: the answer's head reads as net/http's
// would: no Content-Type the provider did not send, no framing headers,
// a head larger than the read buffer, no body after a 204 even if it
// says chunked, and the connection back in the pool once a body is read
// to its end, closed or not.
func TestWireTransportHeadAsNetHTTP(t *testing.T) {
	big := strings.Repeat("x", 5<<10)
	url, n, conns := rawServer(t, func(n int64, c net.Conn) bool {
		switch n {
		case 1: // chunked, no Content-Type, a 5 KiB header
			_, _ = io.WriteString(c, "HTTP/1.1 400 Bad Request\r\nTransfer-Encoding: chunked\r\nX-Big: "+big+"\r\n\r\n5\r\nhello\r\n0\r\n\r\n")
		case 2:
			_, _ = io.WriteString(c, "HTTP/1.1 204 No Content\r\nTransfer-Encoding: chunked\r\n\r\n")
		default:
			_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		}
		return true
	})
	rt := wireFor(t)
	resp := post(t, rt, context.Background(), url, "{}")
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || string(b) != "hello" || resp.StatusCode != 400 || resp.Header.Get("X-Big") != big {
		t.Fatalf("%d %q %v", resp.StatusCode, b, err)
	}
	if ct, te := resp.Header["Content-Type"], resp.Header["Transfer-Encoding"]; ct != nil || te != nil {
		t.Fatalf("Content-Type %q, Transfer-Encoding %q: not sent, or framing", ct, te)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp = post(t, rt, ctx, url, "{}")
	if b, err := io.ReadAll(resp.Body); err != nil || len(b) != 0 || resp.StatusCode != 204 {
		t.Fatalf("204: %q %v", b, err)
	}
	resp.Body.Close()

	// Read to its end and never closed: the connection is free anyway.
	for range 3 {
		resp = post(t, rt, context.Background(), url, "{}")
		if b, _ := io.ReadAll(resp.Body); string(b) != "ok" {
			t.Fatalf("%q", b)
		}
	}
	if got := n.Load(); got != 5 {
		t.Fatalf("%d requests", got)
	}
	if c := conns.Load(); c != 1 {
		t.Fatalf("%d connections, want 1", c)
	}
}

// TestAnthropicAnswerFreesConnection: the executor reads a Messages
// provider's whole answer, translates it and lets go of the original
// body; its connection carries the next request.
func TestAnthropicAnswerFreesConnection(t *testing.T) {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"msg_1","type":"message","role":"assistant","model":"m","content":[{"type":"text","text":"Hi"}],"stop_reason":"end_turn","usage":{"input_tokens":10,"output_tokens":5}}`)
	}))
	conns := countConns(srv)
	srv.Start()
	defer srv.Close()
	p := Provider{Name: "a", Kind: KindAnthropic, Region: "r1", Reach: ReachGlobal, BaseURL: srv.URL, APIKey: "k",
		Jurisdictions: region.NewSet("eu"), Models: []Model{{Name: "m", InputUSDPerMTok: 1, OutputUSDPerMTok: 1}}}
	cat, err := NewCatalog([]Provider{p})
	if err != nil {
		t.Fatal(err)
	}
	ex, pl := euRoute(cat, wireFor(t))
	for i := range 3 {
		if _, err, rec := executeEU(t, ex, pl, "m"); err != nil || rec.Code != 200 {
			t.Fatalf("request %d: %v %d %s", i, err, rec.Code, rec.Body)
		}
	}
	if n := conns.Load(); n != 1 {
		t.Fatalf("%d connections for 3 requests in turn, want 1", n)
	}
}
