package proxy

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"os"
	"strconv"
	"strings"

	"github.com/tiercache/tiercache/internal/cachekey"
	"github.com/tiercache/tiercache/internal/httpcache"
)

// unkeyedForwarding are request fields an origin may reflect into a
// response (absolute links, redirects, routing) although they are not part
// of the cache key. Forwarding a client's value on a cacheable request
// would let one client poison the entry everyone else gets, so they are
// dropped (X-Forwarded-Host and -Proto are then set from the keyed host and
// scheme). A rule that lists one of them in cacheKey.headers makes it part
// of the key, and then it is forwarded.
var unkeyedForwarding = []string{
	"Forwarded", "X-Forwarded-Host", "X-Forwarded-Server", "X-Forwarded-Port",
	"X-Forwarded-Prefix", "X-Host", "X-Original-Url", "X-Rewrite-Url",
	"X-Original-Host", "X-Http-Method-Override", "X-Http-Method", "X-Method-Override",
}

// clientConditionals are dropped from a cache fill: the cache asks the
// origin for the full response (or validates its own copy) and answers the
// client's conditional itself.
var clientConditionals = []string{"If-None-Match", "If-Modified-Since", "If-Range", "Range"}

// outbound builds the request to the origin from the client's request r.
// For a fill (whose answer may be stored) it withholds the unkeyed
// forwarding headers, except those the rule keys on.
func (p *Proxy) outbound(ctx context.Context, r *http.Request, keyed []string, fill bool) *http.Request {
	out := r.Clone(ctx)
	out.RequestURI = ""
	out.URL.Scheme = p.upstream.Scheme
	out.URL.Host = p.upstream.Host
	out.Host = r.Host
	out.Close = false
	if out.Body == nil || r.ContentLength == 0 {
		out.Body = http.NoBody
	} else {
		out.Body = &clientBody{rc: out.Body}
	}
	h := out.Header
	httpcache.RemoveHopByHop(h)
	delete(h, "Expect") // the server already answered 100-continue
	if fill {
		for _, k := range unkeyedForwarding {
			if !containsFold(keyed, k) {
				delete(h, k)
			}
		}
	}
	scheme := cachekey.Scheme(forwardedProto(r.Header), r.TLS != nil)
	if _, ok := h["X-Forwarded-Host"]; !ok && r.Host != "" {
		h["X-Forwarded-Host"] = []string{r.Host}
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
func (p *Proxy) originError(w http.ResponseWriter, r *http.Request, err error) {
	if ce, ok := errors.AsType[*clientBodyError](err); ok {
		p.answerClientBody(w, r, ce)
		return
	}
	status := http.StatusBadGateway
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) {
		status = http.StatusGatewayTimeout
	}
	if r.Context().Err() == nil {
		p.log.Warn("origin request failed", "method", r.Method, "path", r.URL.Path, "err", err)
	}
	h := w.Header()
	h["X-Cache"] = xMiss
	http.Error(w, http.StatusText(status)+": origin unavailable", status)
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

// stream copies the origin body to the client with a flush after every
// read, so the first byte goes out before the origin has finished. It
// returns the first read error other than EOF.
func (p *Proxy) stream(w http.ResponseWriter, body io.Reader) error {
	bp := p.bufs.Get().(*[]byte)
	defer p.bufs.Put(bp)
	buf := *bp
	rc := http.NewResponseController(w)
	for {
		n, err := body.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return nil // the client left; nothing more to do
			}
			_ = rc.Flush()
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}
