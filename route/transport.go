package route

import (
	"bufio"
	"bytes"
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
	"time"
	"unsafe"

	"github.com/valyala/fasthttp"
)

// wireTransport is the http.RoundTripper the executor calls providers
// through: fasthttp's connection pools and HTTP/1.1 codec behind the
// net/http interface the executor is written against.
//
// net/http's Transport gives every pooled connection a reading and a
// writing goroutine and 4 KiB of buffer each way for the connection's
// whole life. Here a connection is read and written by the goroutine that
// uses it, with buffers lent from a pool while an exchange runs (a
// stream holds its 4 KiB read buffer to its end); an idle connection is a
// socket and no more. With 1,000 streams open at 2,000 requests/s the
// node peaked about 20 MiB lower, and a request costs it 33 allocations
// fewer (docs/performance.md).
//
// What net/http does that this transport does itself:
//   - cancellation: the request's context ends the exchange at once, by
//     expiring the connection's deadline (fasthttp has no contexts);
//   - an idle connection the provider closed (a keep-alive timeout
//     shorter than ours, as uvicorn's 5 s) is found before it is used, by
//     peeking at its socket, and never sent a request;
//   - a request written whole is never sent again, as the provider may
//     have processed it;
//   - a head of any size to 1 MiB (the read buffer grows for it);
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
		// Held by every open stream. A cloud API's head runs to 2 KiB
		// (rate-limit headers, cookies, its CDN's), an engine's to a
		// few hundred bytes; a larger one is read through a larger
		// buffer (roundTrip).
		ReadBufferSize: 4 << 10,
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
	if timeout <= 0 {
		timeout = 30 * time.Second // never unbounded: nothing cancels a dial
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
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
// from the connection. The connection goes back to the pool once the body
// is read to its end, and is closed if the body is closed before.
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
	for resent := 0; ; {
		resp, again, err := x.roundTrip(ctx, hc)
		switch {
		case err == nil:
			return resp, nil
		case ctx.Err() != nil:
			err = ctx.Err()
		case again == staleConn:
			// It left the pool: the loop ends with the pool's last
			// connection, or a new one.
			continue
		case again == unsent && resent < 1:
			resent++
			continue
		}
		x.free()
		return nil, err
	}
}

// Why a request may go out again on another connection: never once it
// was written whole, as the provider may have processed it (net/http's
// rule for a POST).
const (
	noRetry   = iota
	staleConn // the pooled connection was closed while it idled
	unsent    // writing to a reused connection failed
)

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
	br      *bufio.Reader // the head's and the body's reader
	ownBR   bool          // br is not the pool's: it grew for a large head
	hc      *fasthttp.HostClient
	release func(keep bool) // gives the connection back, or closes it; nil once done
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
	x.conn, x.br, x.ownBR, x.hc, x.release, x.stop, x.chunked, x.eof = nil, nil, false, nil, nil, nil, nil, false
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

// maxHead bounds an answer's head, as net/http's MaxResponseHeaderBytes
// (10 MiB by default) does; the read buffer grows to it from 4 KiB for
// a head that does not fit.
const maxHead = 1 << 20

// roundTrip sends x.req on a connection from hc and reads the answer's
// head; again says whether the request may go out on another connection.
func (x *exchange) roundTrip(ctx context.Context, hc *fasthttp.HostClient) (*http.Response, int, error) {
	cc, err := hc.AcquireConn(0, false)
	if err != nil {
		return nil, noRetry, err
	}
	reused := !cc.LastUseTime().IsZero()
	conn := cc.Conn()
	if reused && !idleOpen(conn) {
		hc.CloseConn(cc)
		return nil, staleConn, errStale
	}
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(pastDeadline) })
	fail := func(err error, again int) (*http.Response, int, error) {
		stop()
		hc.CloseConn(cc)
		x.resp.Reset()
		return nil, again, err
	}
	bw := hc.AcquireWriter(conn)
	err = x.req.Write(bw)
	if err == nil {
		err = bw.Flush()
	}
	hc.ReleaseWriter(bw)
	if err != nil {
		if reused {
			// The provider closed the connection as the request went
			// out: it has not read all of it.
			return fail(err, unsent)
		}
		return fail(err, noRetry)
	}
	br, own := hc.AcquireReader(conn), false
	for {
		x.resp.StreamBody = true
		x.resp.Header.SetNoDefaultContentType(true) // none sent: none invented
		if err = x.resp.Read(br); err == nil || !headTooLarge(err) || br.Size() >= maxHead {
			break
		}
		// The head is larger than the buffer: read it again, from what
		// has arrived, through one four times the size.
		head, _ := br.Peek(br.Buffered())
		next := bufio.NewReaderSize(io.MultiReader(bytes.NewReader(bytes.Clone(head)), conn), 4*br.Size())
		if !own {
			hc.ReleaseReader(br)
		}
		br, own = next, true
		x.resp.Reset()
	}
	if err != nil {
		if !own {
			hc.ReleaseReader(br)
		}
		return fail(err, noRetry)
	}
	x.conn, x.br, x.ownBR, x.hc, x.stop = conn, br, own, hc, stop
	x.release = func(keep bool) {
		if keep {
			hc.ReleaseConn(cc)
		} else {
			hc.CloseConn(cc)
		}
	}
	return x.response(), noRetry, nil
}

// headTooLarge says whether err is fasthttp's for a head larger than its
// read buffer. roundTrip calls it only once a read failed, so the target
// errors.As needs is allocated then and not for every answer.
func headTooLarge(err error) bool {
	var small *fasthttp.ErrSmallBuffer
	return errors.As(err, &small)
}

// response is x's answer as net/http's: the head copied, the body read
// through x.
func (x *exchange) response() *http.Response {
	w := &wireResponse{body: wireBody{x: x}}
	r := &w.Response
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
// string and every value slice in one array. The framing headers
// (Transfer-Encoding, Connection) are left out, as net/http leaves them.
func headerOf(h *fasthttp.ResponseHeader) http.Header {
	n, size := 0, 0
	for k, v := range h.All() {
		if !framing(k) {
			n++
			size += len(k) + len(v)
		}
	}
	buf := make([]byte, 0, size)
	for k, v := range h.All() {
		if !framing(k) {
			buf = append(append(buf, k...), v...)
		}
	}
	all := unsafe.String(unsafe.SliceData(buf), len(buf)) // buf is not written again
	vals := make([]string, n)
	out := make(http.Header, n)
	i, off := 0, 0
	for k, v := range h.All() {
		if framing(k) {
			continue
		}
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

func framing(k []byte) bool {
	return string(k) == "Transfer-Encoding" || string(k) == "Connection"
}

// wireBody reads an answer's body from its connection. Close lets go of
// what it holds; a second Close does nothing.
type wireBody struct{ x *exchange }

var errBodyClosed = errors.New("http: read on closed response body")

func (b *wireBody) Read(p []byte) (int, error) {
	x := b.x
	if x == nil {
		return 0, errBodyClosed
	}
	n, err := x.read(p)
	if err == io.EOF {
		x.settle() // the connection is free for the next request
	}
	return n, err
}

func (b *wireBody) Close() error {
	if x := b.x; x != nil {
		b.x = nil
		x.settle()
		x.free()
	}
	return nil
}

// read reads the body, noting its end.
func (x *exchange) read(p []byte) (int, error) {
	if x.eof {
		return 0, io.EOF
	}
	var n int
	var err error
	switch s := x.resp.BodyStream(); {
	case s == nil: // no body (a 204, a 304)
		err = io.EOF
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
	default:
		n, err = s.Read(p)
	}
	if err == io.EOF {
		x.eof = true
	}
	return n, err
}

// settle ends x's use of its connection, once: back to the pool after a
// body read to its end (or whose end has already arrived) that nothing
// canceled, else closed.
func (x *exchange) settle() {
	if x.release == nil {
		return
	}
	canceled := !x.stop() // the cancellation ran: the deadline is gone
	if !x.eof && !canceled {
		x.finish()
	}
	keep := x.eof && !canceled && !x.resp.ConnectionClose()
	_ = x.resp.CloseBodyStream()
	if !x.ownBR {
		x.hc.ReleaseReader(x.br)
	}
	x.release(keep)
	x.release, x.br, x.conn, x.chunked = nil, nil, nil, nil
}

// finish reads what is left of the body if it has already arrived (a
// caller that stops at a stream's [DONE], before the chunked body's last
// chunk), so that the connection is reusable. It never waits for the
// network.
func (x *exchange) finish() {
	if x.conn.SetReadDeadline(pastDeadline) != nil {
		return
	}
	for n := 0; n < 64<<10 && !x.eof; {
		m, err := x.read(x.scratch[:])
		n += m
		if err != nil {
			break
		}
	}
	if x.eof && x.conn.SetReadDeadline(time.Time{}) != nil {
		x.eof = false
	}
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
