package proxy

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"net/url"
	"os"
	"strconv"
	"strings"
	"syscall"

	"github.com/tiercache/tiercache/internal/cachekey"
	"github.com/tiercache/tiercache/internal/httpcache"
	"github.com/tiercache/tiercache/internal/originview"
)

// unkeyedForwarding are request fields that frameworks trust to rebuild
// the request's scheme, host, port, path or method (absolute links,
// redirects, routing) although they are not part of the cache key.
// Forwarding a client's value on a fill would let one client decide the
// entry everyone else gets (a Rack app told "X-Forwarded-Scheme: http"
// stores a redirect loop), so fills withhold them, whatever the tier's
// request header mode; X-Forwarded-Host and X-Forwarded-Proto are then set
// from the keyed host and scheme. A header the key holds (a rule's
// cacheKey.headers, or a name in the stored response's Vary) is forwarded.
// Requests that are never stored keep them all.
//
// Client address fields (X-Forwarded-For, X-Real-IP, True-Client-IP, ...)
// are not listed: they say who asks, not what is asked; an answer that
// depends on them is per client and must be marked private or Vary by the
// origin, and origins behind an ingress need them for logs and limits.
// Strict mode (requestHeaders.mode) drops them on fills unless allowed.
//
// This is the one list; docs/caching.md has it as a table.
var unkeyedForwarding = []string{
	// host and port
	"Forwarded", "X-Forwarded-Host", "X-Forwarded-Server", "X-Forwarded-Port",
	"X-Host", "X-Original-Host",
	// scheme and TLS
	"X-Forwarded-Scheme", "X-Forwarded-Ssl", "Front-End-Https", "X-Url-Scheme",
	"X-Forwarded-Protocol", "X-Scheme", "X-Original-Proto", "X-Arr-Ssl", "Cloudfront-Forwarded-Proto",
	// path and prefix
	"X-Forwarded-Prefix", "X-Original-Prefix", "X-Original-Url", "X-Original-Uri",
	"X-Rewrite-Url", "X-Forwarded-Uri", "X-Forwarded-Path", "X-Envoy-Original-Path", "X-Script-Name",
	// framework internals a client must never set (Next.js: middleware
	// skipped, a route's cached data chosen)
	"X-Middleware-Subrequest", "X-Now-Route-Matches",
	// method
	"X-Http-Method-Override", "X-Http-Method", "X-Method-Override",
}

// fillHeaders says which client request headers a fill forwards.
type fillHeaders struct {
	// keyed are held by the key: the rule's cacheKey.headers and the Vary
	// names of the stored marker, when known. Always forwarded.
	keyed, vary []string
	// cookies are the cookies the rule keys on: in strict mode the Cookie
	// field is forwarded with these only.
	cookies []string
	// strict forwards only allow (canonical names) besides keyed.
	strict bool
	allow  []string
}

// forwards reports whether a fill forwards the client's header name.
//
// A name spelt with anything but letters, digits and '-' ("X_Tenant",
// "Accept.Language") is another spelling of a dashed name to many
// gateways (originview.SameName), so it would reach the origin past every
// comparison the cache makes on the dashed name (withheld, keyed, Vary):
// it is dropped, as nginx drops it by default, unless the tier lets it
// through by name (requestHeaders.allowUnderscoredNames), which keys it
// (it is then in keyed).
func (fh *fillHeaders) forwards(name string) bool {
	if containsFold(fh.keyed, name) || containsFold(fh.vary, name) {
		return true
	}
	if !originview.Dashed(name) || containsFold(unkeyedForwarding, name) {
		return false
	}
	if fh.strict && len(fh.cookies) > 0 && strings.EqualFold(name, "Cookie") {
		return true // filtered to the keyed cookies by keyedCookiesOnly
	}
	return !fh.strict || containsFold(fh.allow, name)
}

// keyedCookiesOnly rewrites a strict fill's Cookie field to the cookies
// the key holds (unless the tier allows the whole field): a cookie the key
// does not hold must not reach an origin whose answer is shared.
func (fh *fillHeaders) keyedCookiesOnly(h http.Header) {
	if !fh.strict || len(fh.cookies) == 0 || containsFold(fh.allow, "Cookie") {
		return
	}
	var kept []string
	for _, line := range h["Cookie"] {
		for rest := line; rest != ""; {
			var part string
			part, rest, _ = strings.Cut(rest, ";")
			part = strings.Trim(part, " \t")
			name, _, _ := strings.Cut(part, "=")
			for _, c := range fh.cookies {
				if name == c {
					kept = append(kept, part)
					break
				}
			}
		}
	}
	if len(kept) == 0 {
		delete(h, "Cookie")
		return
	}
	h["Cookie"] = []string{strings.Join(kept, "; ")}
}

// sentHeader is the client's header as a fill forwarded it: the fields
// the fill withheld read as absent.
type sentHeader struct {
	h  http.Header
	fh *fillHeaders
}

func (s sentHeader) Values(name string) []string {
	if s.fh != nil && !s.fh.forwards(name) {
		return nil
	}
	return s.h.Values(name)
}

// clientConditionals are dropped from a cache fill: the cache asks the
// origin for the full response (or validates its own copy) and answers the
// client's conditional itself.
var clientConditionals = []string{"If-None-Match", "If-Modified-Since", "If-Range", "Range"}

// outbound builds the request to the origin from the client's request r.
// For a fill (fill not nil: its answer may be stored) it forwards only the
// headers fill allows. The Host the origin receives is the normalized host
// the key holds.
func (p *Proxy) outbound(ctx context.Context, r *http.Request, fill *fillHeaders) *http.Request {
	return outboundTo(p.upstream, ctx, r, fill)
}

// outboundTo is outbound for any origin base URL.
func outboundTo(upstream *url.URL, ctx context.Context, r *http.Request, fill *fillHeaders) *http.Request {
	out := r.Clone(ctx)
	out.RequestURI = ""
	out.URL.Scheme = upstream.Scheme
	out.URL.Host = upstream.Host
	scheme := cachekey.RequestScheme(r)
	out.Host = cachekey.Host(r.Host, scheme)
	out.Close = false
	if out.Body == nil || r.ContentLength == 0 {
		out.Body = http.NoBody
	} else {
		out.Body = &clientBody{rc: out.Body}
	}
	h := out.Header
	httpcache.RemoveHopByHop(h)
	if c := h["Cookie"]; len(c) > 1 {
		// One field line, as RFC 6265 §5.4 says a client sends it: some
		// servers join repeated lines with ',' and then cannot split the
		// cookies (gunicorn and Django), which would make the origin read
		// other cookies than the key holds.
		h["Cookie"] = []string{strings.Join(c, "; ")}
	}
	delete(h, "Expect") // the server already answered 100-continue
	// The debug field carries the tier's purge token: it never leaves the
	// sidecar, whatever path the request takes (fill, pass, upgrade).
	delete(h, debugHeader)
	if fill != nil {
		for k := range h {
			if !fill.forwards(k) {
				delete(h, k)
			}
		}
		fill.keyedCookiesOnly(h)
	}
	if _, ok := h["X-Forwarded-Host"]; !ok && out.Host != "" {
		h["X-Forwarded-Host"] = []string{out.Host}
	}
	h["X-Forwarded-Proto"] = []string{scheme}
	if ip, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		if prior := h["X-Forwarded-For"]; len(prior) > 0 {
			ip = strings.Join(prior, ", ") + ", " + ip
		}
		h["X-Forwarded-For"] = []string{ip}
	}
	h["Via"] = append(h["Via"], viaValue)
	// The client's User-Agent absent means none: keep Go from adding its own.
	if _, ok := h["User-Agent"]; !ok {
		h["User-Agent"] = []string{""}
	}
	return out
}

func containsFold(list []string, s string) bool {
	for _, v := range list {
		if strings.EqualFold(v, s) {
			return true
		}
	}
	return false
}

// roundTrip sends out to the origin and counts it. When w is not nil,
// interim 1xx responses are relayed to it.
func (p *Proxy) roundTrip(out *http.Request, w http.ResponseWriter) (*http.Response, error) {
	if w != nil {
		trace := &httptrace.ClientTrace{
			Got1xxResponse: func(code int, header textproto.MIMEHeader) error {
				if code == http.StatusSwitchingProtocols {
					return nil
				}
				h := w.Header()
				for k, vs := range header {
					h[k] = vs
				}
				w.WriteHeader(code)
				for k := range header {
					delete(h, k)
				}
				return nil
			},
		}
		out = out.WithContext(httptrace.WithClientTrace(out.Context(), trace))
	}
	start := p.now()
	resp, err := p.rt.RoundTrip(out)
	p.m.OriginDuration.Observe(p.now().Sub(start).Seconds())
	if err != nil {
		if ce, ok := clientBodyFailure(out, err); ok {
			return nil, ce
		}
		p.m.OriginRequests.WithLabelValues("error").Inc()
		return nil, err
	}
	p.m.OriginRequests.WithLabelValues(strconv.Itoa(resp.StatusCode)).Inc()
	return resp, nil
}

// originError answers a client when the origin could not be reached: 504
// for a timeout, 502 otherwise; or 4xx when the client's body was at fault.
func (p *Proxy) originError(w http.ResponseWriter, r *http.Request, v verdict, err error) sent {
	if ce, ok := errors.AsType[*clientBodyError](err); ok {
		return p.answerClientBody(w, r, ce)
	}
	status := http.StatusBadGateway
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) {
		status = http.StatusGatewayTimeout
	}
	if r.Context().Err() == nil {
		p.log.Warn("origin request failed", "method", r.Method, "path", r.URL.Path, "err", err)
	}
	p.setStatus(w.Header(), v, status)
	return errorAnswer(w, r, http.StatusText(status)+": origin unavailable", status)
}

// errorAnswer writes http.Error's answer and says what went out: msg and
// its newline, no body for HEAD.
func errorAnswer(w http.ResponseWriter, r *http.Request, msg string, status int) sent {
	http.Error(w, msg, status)
	if r.Method == http.MethodHead {
		return sent{status: status}
	}
	return sent{status: status, bytes: int64(len(msg)) + 1}
}

// unreachable reports whether err (after watchdog.reason) means the origin
// could not be reached at all, the case in which RFC 9111 §4.2.4 lets a
// cache serve stale responses without the origin's stale-if-error: no
// connection (refused, unreachable, or the dial timed out), a connection
// reset or closed before any byte of a response, or a request the origin
// did not take within origin.idleTimeout. A response that arrived but was
// malformed or late (origin.responseHeaderTimeout) is an origin error, not
// unreachability, and so is anything the client caused.
func unreachable(err error) bool {
	if err == nil {
		return false
	}
	if te, ok := errors.AsType[*timeoutError](err); ok {
		return te.unreachable
	}
	if _, ok := errors.AsType[*clientBodyError](err); ok || errors.Is(err, context.Canceled) {
		return false
	}
	if op, ok := errors.AsType[*net.OpError](err); ok && op.Op == "dial" {
		return true
	}
	for _, e := range [...]error{syscall.ECONNREFUSED, syscall.ECONNRESET, syscall.ECONNABORTED, syscall.EPIPE,
		syscall.EHOSTUNREACH, syscall.ENETUNREACH, io.EOF} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// copyHeader copies the origin's response header to the client, minus
// hop-by-hop fields, plus Via.
func copyHeader(dst, src http.Header) {
	for k, vs := range src {
		dst[k] = append(dst[k], vs...)
	}
	httpcache.RemoveHopByHop(dst)
	appendVia(dst)
}

// streamN copies the origin body to the client with a flush after every
// read, so the first byte goes out before the origin has finished. It
// returns how many bytes reached w (the access log's count) and the first
// read error other than EOF.
func (p *Proxy) streamN(w http.ResponseWriter, body io.Reader) (int64, error) {
	var total int64
	bp := p.bufs.Get().(*[]byte)
	defer p.bufs.Put(bp)
	buf := *bp
	rc := http.NewResponseController(w)
	for {
		n, err := body.Read(buf)
		if n > 0 {
			k, werr := w.Write(buf[:n])
			total += int64(k)
			if werr != nil {
				return total, nil // the client left; nothing more to do
			}
			_ = rc.Flush()
		}
		if err == io.EOF {
			return total, nil
		}
		if err != nil {
			return total, err
		}
	}
}
