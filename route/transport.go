package route

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httputil"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/valyala/fasthttp"
)

// wireTransport is the http.RoundTripper the executor calls providers
// through: fasthttp's connection pools and HTTP/1.1 codec behind the
// net/http interface the executor is written against.
//
// net/http's Transport gives every pooled connection a reading and a
// writing goroutine and 8 KiB of buffers for the connection's whole life,
// and builds its requests and answers with some 80 allocations. Here a
// connection is read and written by the goroutine that uses it, with
// buffers lent from a pool while a request is in flight; an idle
// connection is a socket and no more. With 1,000 streams open that is
// 2,000 goroutines and about 30 MiB the node does not hold.
//
// What net/http does that this transport adds itself:
//   - cancellation: the request's context ends the exchange at once, by
//     expiring the connection's deadline (fasthttp has no contexts);
//   - an idle connection the provider closed (a keep-alive timeout
//     shorter than ours, as uvicorn's 5 s) is found before it is used, by
//     peeking at its socket, and never sent a request;
//   - TLS dialed and handshaken within ConnectTimeout.
//
// It speaks HTTP/1.1 only. A node with HTTP(S)_PROXY set uses net/http's
// Transport instead (newUpstreamTransport), which honours the proxy.
type wireTransport struct {
	cfg       ExecutorConfig
	tlsConfig *tls.Config // nil: the system's roots
	mu        sync.Mutex
	hosts     atomic.Pointer[map[hostKey]*fasthttp.HostClient] // copy on write
}

// hostKey names a connection pool.
type hostKey struct{ scheme, host string }

// newUpstreamTransport returns the transport providers are called
// through: net/http's where the environment names a proxy, else a
// wireTransport.
func newUpstreamTransport(cfg ExecutorConfig) http.RoundTripper {
	for _, k := range []string{"HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"} {
		if os.Getenv(k) != "" {
			return newTransport(cfg)
		}
	}
	return &wireTransport{cfg: cfg}
}

// host returns the pool for scheme://host, made on first use.
func (t *wireTransport) host(scheme, host string) (*fasthttp.HostClient, error) {
	key := hostKey{scheme, host}
	if m := t.hosts.Load(); m != nil {
		if hc := (*m)[key]; hc != nil {
			return hc, nil
		}
	}
	var tlsName string
	switch scheme {
	case "https":
		h, _, err := net.SplitHostPort(fasthttp.AddMissingPort(host, true))
		if err != nil {
			return nil, err
		}
		tlsName = h
	case "http":
	default:
		return nil, errors.New("unsupported protocol scheme " + strconv.Quote(scheme))
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	old := t.hosts.Load()
	if old != nil && (*old)[key] != nil {
		return (*old)[key], nil
	}
	cfg := t.cfg
	var tc *tls.Config
	if tlsName != "" {
		tc = &tls.Config{}
		if t.tlsConfig != nil {
			tc = t.tlsConfig.Clone()
		}
		tc.ServerName, tc.NextProtos = tlsName, []string{"http/1.1"}
	}
	hc := &fasthttp.HostClient{
		Addr:                     fasthttp.AddMissingPort(host, scheme == "https"),
		Dial:                     func(addr string) (net.Conn, error) { return dialUpstream(addr, tc, cfg.ConnectTimeout) },
		MaxConns:                 math.MaxInt32, // as net/http: no bound but the caller's
		MaxIdleConnDuration:      cfg.IdleConnTimeout,
		ConnPoolStrategy:         fasthttp.LIFO, // the least used connections idle out
		NoDefaultUserAgentHeader: true,
		// An answer's head must fit the read buffer. A cloud API's runs
		// to 2 KiB (rate-limit headers, cookies, its CDN's), and more
		// behind a gateway of the provider's; an engine's is a few
		// hundred bytes.
		ReadBufferSize: 4 << 10,
	}
	if tc != nil {
		hc.ReadBufferSize = 16 << 10
	}
	m := make(map[hostKey]*fasthttp.HostClient, 1)
	if old != nil {
		for k, v := range *old {
			m[k] = v
		}
	}
	m[key] = hc
	t.hosts.Store(&m)
	return hc, nil
}

// dialUpstream connects to addr, with TLS when tc is set, handshake
// included, within timeout.
func dialUpstream(addr string, tc *tls.Config, timeout time.Duration) (net.Conn, error) {
	ctx := context.Background()
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	d := net.Dialer{KeepAlive: 30 * time.Second}
	raw, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	c := newPeekConn(raw)
	if tc == nil {
		return c, nil
	}
	conn := tls.Client(c, tc)
	if err := conn.HandshakeContext(ctx); err != nil {
		raw.Close()
		return nil, err
	}
	return conn, nil
}

// CloseIdleConnections closes every pool's idle connections.
func (t *wireTransport) CloseIdleConnections() {
	if m := t.hosts.Load(); m != nil {
		for _, hc := range *m {
			hc.CloseIdleConnections()
		}
	}
}

// pastDeadline is a deadline long gone: set on a connection, it ends any
// read or write in progress on it.
var pastDeadline = time.Unix(1, 0)

// RoundTrip sends req and returns the answer's head, its body streamed
// from the connection. The connection goes back to the pool when the
// body is read to its end and closed, and is closed otherwise.
func (t *wireTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	hc, err := t.host(req.URL.Scheme, req.URL.Host)
	if err == nil {
		err = ctx.Err()
	}
	if err != nil {
		closeBody(req)
		return nil, err
	}
	x := exchanges.Get().(*exchange)
	if err := x.request(req); err != nil {
		x.free()
		return nil, err
	}
	for try := 0; ; try++ {
		resp, retry, err := x.roundTrip(ctx, hc)
		switch {
		case err == nil:
			return resp, nil
		case ctx.Err() != nil:
			err = ctx.Err()
		case retry && try < maxStale:
			continue
		}
		x.free()
		return nil, err
	}
}

// maxStale bounds the connections a request may find closed by the
// provider before it is sent on a new one.
const maxStale = 4

func closeBody(req *http.Request) {
	if req.Body != nil {
		req.Body.Close()
	}
}

// exchange is one request and its answer on a pooled connection; the
// pool keeps the fasthttp request and answer with their buffers grown.
type exchange struct {
	req     fasthttp.Request
	resp    fasthttp.Response
	conn    net.Conn
	br      *bufio.Reader
	hc      *fasthttp.HostClient
	release func(keep bool) // gives the connection back, or closes it
	stop    func() bool     // unregisters the cancellation
	chunked io.Reader       // a chunked body's reader, made on first read
	eof     bool            // the body was read to its end
	scratch [64]byte        // for finish
}

var exchanges = sync.Pool{New: func() any { return new(exchange) }}

// free gives x back to the pool; its connection must be settled.
func (x *exchange) free() {
	x.req.Reset()
	x.resp.Reset()
	x.conn, x.br, x.hc, x.release, x.stop, x.chunked, x.eof = nil, nil, nil, nil, nil, nil, false
	exchanges.Put(x)
}

// request copies req into x.req.
func (x *exchange) request(req *http.Request) error {
	r := &x.req
	r.Header.DisableNormalizing() // the executor's names are canonical
	r.Header.SetMethod(req.Method)
	r.Header.SetRequestURI(req.URL.RequestURI())
	host := req.Host
	if host == "" {
		host = req.URL.Host
	}
	r.Header.SetHost(host)
	for k, vs := range req.Header {
		for _, v := range vs {
			r.Header.Add(k, v)
		}
	}
	if req.Body == nil || req.Body == http.NoBody {
		return nil
	}
	defer req.Body.Close()
	_, err := io.Copy(r.BodyWriter(), req.Body)
	return err
}

// errStale is a pooled connection the provider closed while it idled.
var errStale = errors.New("idle connection closed by the provider")

// roundTrip sends x.req on a connection from hc and reads the answer's
// head; retry says the request never reached the provider, so that
// sending it on another connection is safe.
func (x *exchange) roundTrip(ctx context.Context, hc *fasthttp.HostClient) (*http.Response, bool, error) {
	cc, err := hc.AcquireConn(0, false)
	if err != nil {
		return nil, false, err
	}
	reused := !cc.LastUseTime().IsZero()
	conn := cc.Conn()
	if reused && !idleOpen(conn) {
		hc.CloseConn(cc)
		return nil, true, errStale
	}
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(pastDeadline) })
	bw := hc.AcquireWriter(conn)
	err = x.req.Write(bw)
	if err == nil {
		err = bw.Flush()
	}
	hc.ReleaseWriter(bw)
	var br *bufio.Reader
	if err == nil {
		br = hc.AcquireReader(conn)
		x.resp.StreamBody = true
		if err = x.resp.Read(br); err != nil {
			hc.ReleaseReader(br)
		}
	}
	if err != nil {
		stop()
		hc.CloseConn(cc)
		x.resp.Reset()
		// Nothing came back from a reused connection: the provider
		// closed it as the request went out, and never read it.
		retry := reused && (errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE))
		return nil, retry, err
	}
	x.conn, x.br, x.hc, x.stop = conn, br, hc, stop
	x.release = func(keep bool) {
		if keep {
			hc.ReleaseConn(cc)
		} else {
			hc.CloseConn(cc)
		}
	}
	return x.response(), false, nil
}

// response is x's answer as net/http's: the head copied, the body read
// through x.
func (x *exchange) response() *http.Response {
	w := &wireResponse{body: wireBody{x: x}}
	r := &w.Response
	r.Status = ""
	r.StatusCode = x.resp.StatusCode()
	r.Proto, r.ProtoMajor, r.ProtoMinor = "HTTP/1.1", 1, 1
	r.Header = headerOf(&x.resp.Header)
	r.ContentLength = int64(x.resp.Header.ContentLength())
	if r.ContentLength < 0 {
		r.ContentLength = -1
	}
	r.Body = &w.body
	return r
}

// wireResponse is an answer and its body in one allocation.
type wireResponse struct {
	http.Response
	body wireBody
}

// headerOf copies h into an http.Header, every name and value in one
// string and every value slice in one array.
func headerOf(h *fasthttp.ResponseHeader) http.Header {
	n, size := 0, 0
	for k, v := range h.All() {
		n++
		size += len(k) + len(v)
	}
	buf := make([]byte, 0, size)
	for k, v := range h.All() {
		buf = append(append(buf, k...), v...)
	}
	all := unsafe.String(unsafe.SliceData(buf), len(buf)) // buf is not written again
	vals := make([]string, n)
	out := make(http.Header, n)
	i, off := 0, 0
	for k, v := range h.All() {
		key := all[off : off+len(k)]
		off += len(k)
		vals[i] = all[off : off+len(v)]
		off += len(v)
		if prev, ok := out[key]; ok {
			out[key] = append(prev, vals[i])
		} else {
			out[key] = vals[i : i+1 : i+1]
		}
		i++
	}
	return out
}

// wireBody reads an answer's body from its connection. Close settles the
// connection: back to the pool after a body read to its end, else closed;
// a second Close does nothing.
type wireBody struct{ x *exchange }

func (b *wireBody) Read(p []byte) (int, error) {
	x := b.x
	switch {
	case x == nil:
		return 0, errBodyClosed
	case x.eof:
		return 0, io.EOF
	}
	var n int
	var err error
	switch s := x.resp.BodyStream(); {
	case x.resp.Header.ContentLength() == -1:
		// net/http's chunked reader returns every whole chunk that has
		// arrived, not one a call, so that a relay sees the burst of
		// events that came together and flushes once for all of them.
		if x.chunked == nil {
			x.chunked = httputil.NewChunkedReader(x.br)
		}
		if n, err = x.chunked.Read(p); err == io.EOF {
			if terr := readTrailer(x.br); terr != nil {
				err = terr
			}
		}
	case s != nil:
		n, err = s.Read(p)
	default:
		err = io.EOF
	}
	if err == io.EOF {
		x.eof = true
	}
	return n, err
}

// readTrailer reads the trailer that ends a chunked body, up to the empty
// line, and discards it.
func readTrailer(br *bufio.Reader) error {
	for n := 0; n < 64; n++ {
		line, err := br.ReadSlice('\n')
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return err
		}
		if len(line) <= 2 && (len(line) == 1 || line[0] == '\r') {
			return nil
		}
	}
	return errors.New("chunked body: trailer too long")
}

var errBodyClosed = errors.New("http: read on closed response body")

func (b *wireBody) Close() error {
	x := b.x
	if x == nil {
		return nil
	}
	b.x = nil
	canceled := !x.stop() // the cancellation ran: the deadline is gone
	if !x.eof && !canceled {
		b.x = x
		b.finish()
		b.x = nil
	}
	keep := x.eof && !canceled && !x.resp.ConnectionClose()
	_ = x.resp.CloseBodyStream()
	x.hc.ReleaseReader(x.br)
	x.release(keep)
	x.free()
	return nil
}

// finish reads what is left of the body if it has already arrived: a
// stream's relay stops at [DONE], before the chunked body's last chunk,
// and the connection is reusable once that is read. It never waits for
// the network.
func (b *wireBody) finish() {
	x := b.x
	if x.conn.SetReadDeadline(pastDeadline) != nil {
		return
	}
	for n := 0; n < 64<<10 && !x.eof; {
		m, err := b.Read(x.scratch[:])
		n += m
		if err != nil {
			break
		}
	}
	if x.eof && x.conn.SetReadDeadline(time.Time{}) != nil {
		x.eof = false
	}
}
