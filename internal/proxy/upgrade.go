package proxy

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tiercache/tiercache/internal/connguard"
	"github.com/tiercache/tiercache/internal/metrics"
	"github.com/tiercache/tiercache/internal/tierconfig"
)

// IsUpgrade reports whether r asks to switch protocols (RFC 9110 §7.8) in
// a way the sidecar tunnels: a GET with an Upgrade field and the "upgrade"
// token in Connection, as a WebSocket handshake is. Such requests are
// never cached: Upgrades tunnels them. Other upgrades are ignored, as RFC
// 9110 allows, and served as plain HTTP/1.1 requests: those on other
// methods, and h2c (HTTP/2 over cleartext, which the sidecar does not
// speak; h2c clients fall back to HTTP/1.1 by design).
func IsUpgrade(r *http.Request) bool {
	up := r.Header["Upgrade"]
	if len(up) == 0 || r.Method != http.MethodGet {
		return false
	}
	if len(up) == 1 && strings.EqualFold(strings.TrimSpace(up[0]), "h2c") {
		return false
	}
	for _, v := range r.Header["Connection"] {
		for _, tok := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(tok), "upgrade") {
				return true
			}
		}
	}
	return false
}

// Upgrades forwards protocol-switching requests (WebSocket and the like)
// to the origin and, once the origin answers 101 Switching Protocols,
// copies bytes both ways between the client's and the origin's connection
// until either side closes. It tracks the open tunnels so that the
// sidecar can close them when it shuts down: http.Server.Shutdown does not
// know hijacked connections.
//
// Tunnels use nothing of a data-plane generation (no cache, no store), so
// one Upgrades serves a sidecar for its whole life: a config change that
// rebuilds L1 or L2 leaves open WebSockets alone.
type Upgrades struct {
	// Limits: an open tunnel holds an origin connection, two goroutines
	// and their buffers, so their number is bounded (503 beyond it), and
	// a tunnel that carries no byte either way for idle is closed.
	max  int
	idle time.Duration

	upstream *url.URL
	cfg      *tierconfig.Holder
	rt       http.RoundTripper
	m        *metrics.Metrics
	log      *slog.Logger

	mu      sync.Mutex
	open    map[net.Conn]struct{}
	pending int // slots reserved by handshakes in progress
	closed  bool
	wg      sync.WaitGroup // open tunnels
}

// Default limits of Upgrades (the sidecar's --max-upgraded-connections and
// --upgrade-idle-timeout).
const (
	DefaultMaxUpgraded   = 1024
	DefaultUpgradeIdle   = time.Hour
	minUpgradeIdle       = time.Second
	upgradeCopyBufferLen = 16 << 10
)

// NewUpgrades returns an Upgrades that tunnels to upstream through rt, at
// most "most" at once (0: DefaultMaxUpgraded), each closed after idle without
// a byte either way (0: DefaultUpgradeIdle).
func NewUpgrades(upstream *url.URL, cfg *tierconfig.Holder, rt http.RoundTripper, m *metrics.Metrics, log *slog.Logger, most int, idle time.Duration) *Upgrades {
	if log == nil {
		log = slog.Default()
	}
	if most <= 0 {
		most = DefaultMaxUpgraded
	}
	if idle <= 0 {
		idle = DefaultUpgradeIdle
	}
	idle = max(idle, minUpgradeIdle)
	return &Upgrades{max: most, idle: idle, upstream: upstream, cfg: cfg, rt: rt, m: m, log: log, open: make(map[net.Conn]struct{})}
}

// Upgrade result label values of tiercache_upgrades_total.
const (
	upgradeSwitched = "switched" // 101 from the origin: tunnel opened
	upgradeRefused  = "refused"  // the origin answered something else
	upgradeError    = "error"    // no answer, or the tunnel could not start
)

// ServeHTTP tunnels r, which IsUpgrade accepted. An origin that answers
// without switching has its answer passed through like any bypassed
// request.
func (u *Upgrades) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	result := metrics.ResultBypass
	defer func() { u.m.Request(result, metrics.LayerOrigin, time.Since(start).Seconds()) }()
	cfg := u.cfg.Load()

	if !u.reserve() {
		u.m.Upgrade(upgradeRefused)
		u.log.Warn("refused an upgrade: too many upgraded connections open", "max", u.max, "path", r.URL.Path)
		result = metrics.ResultError
		w.Header().Set("Retry-After", "1")
		http.Error(w, "tiercache: too many upgraded connections open; retry", http.StatusServiceUnavailable)
		return
	}
	// The origin has the response-header timeout to answer; the tunnel
	// itself has no deadline (a WebSocket may stay open for hours), only
	// the idle bound.
	ctx, cancel := context.WithCancel(context.WithoutCancel(r.Context()))
	defer cancel()
	// The slot is held from here to the tunnel's end, or given back.
	tracked := false
	defer func() {
		if !tracked {
			u.unreserve()
		}
	}()
	hdrTimer := time.AfterFunc(cfg.Config.Origin.ResponseHeaderTimeout.Std(), cancel)
	out := u.outbound(ctx, r)
	resp, err := u.rt.RoundTrip(out)
	hdrTimer.Stop()
	if err != nil {
		u.m.OriginRequests.WithLabelValues("error").Inc()
		u.m.Upgrade(upgradeError)
		result = metrics.ResultError
		u.log.Warn("upgrade: origin request failed", "path", r.URL.Path, "upgrade", r.Header.Get("Upgrade"), "err", err)
		status := http.StatusBadGateway
		if ctx.Err() != nil {
			status = http.StatusGatewayTimeout
		}
		http.Error(w, http.StatusText(status)+": origin unavailable", status)
		return
	}
	u.m.OriginRequests.WithLabelValues(strconv.Itoa(resp.StatusCode)).Inc()
	if resp.StatusCode != http.StatusSwitchingProtocols {
		defer resp.Body.Close()
		u.m.Upgrade(upgradeRefused)
		h := w.Header()
		copyHeader(h, resp.Header)
		stripTargeted(h, cfg.StripTargeted)
		h["X-Cache"] = xBypass
		rule, _ := cfg.MatchRequest(r.Host, r.URL.EscapedPath(), r.Header)
		if cs, ok := cacheStatus(cfg, verdict{x: xBypass, rule: rule, fwd: fwdBypass}, resp.StatusCode, 0, false); ok {
			h["Cache-Status"] = append(h["Cache-Status"], cs)
		}
		w.WriteHeader(resp.StatusCode)
		// Streamed like any pass-through: flushed as it comes, ended when
		// the client leaves, cut after the idle timeout without a byte.
		stop := context.AfterFunc(r.Context(), cancel)
		defer stop()
		copyFlushing(w, resp.Body, cfg.Config.Origin.IdleTimeout.Std(), cancel)
		return
	}
	backend, ok := resp.Body.(io.ReadWriteCloser)
	if !ok { // net/http's Transport always gives one on 101
		resp.Body.Close()
		u.fail(w, r, "the origin's 101 response has no writable body")
		result = metrics.ResultError
		return
	}
	if !offered(r.Header.Values("Upgrade"), resp.Header.Get("Upgrade")) {
		// RFC 9110 §7.8: the server switches to one of the protocols the
		// client listed, or the client cannot speak it.
		backend.Close()
		u.fail(w, r, "the origin switched to "+strconv.Quote(resp.Header.Get("Upgrade"))+", which the client did not offer")
		result = metrics.ResultError
		return
	}
	tracked = true // tunnel takes the slot over (and gives it back)
	if err := u.tunnel(w, r, resp, backend, cfg.StripTargeted); err != nil {
		backend.Close()
		u.fail(w, r, err.Error())
		result = metrics.ResultError
	}
}

func (u *Upgrades) fail(w http.ResponseWriter, r *http.Request, why string) {
	u.m.Upgrade(upgradeError)
	u.log.Warn("upgrade failed", "path", r.URL.Path, "err", why)
	http.Error(w, "Bad Gateway: "+why, http.StatusBadGateway)
}

// outbound is the request to the origin: the client's, as any pass-through
// forwards it, with the Upgrade and Connection fields put back (they are
// hop-by-hop, and this hop is the one that switches).
func (u *Upgrades) outbound(ctx context.Context, r *http.Request) *http.Request {
	out := outboundTo(u.upstream, ctx, r, nil)
	out.Header["Upgrade"] = r.Header.Values("Upgrade")
	out.Header["Connection"] = []string{"Upgrade"}
	return out
}

// tunnel answers 101 to the client with the origin's header (less the
// targeted fields in strip), takes over
// the client's connection and copies bytes both ways until either side
// closes. It returns an error only when the tunnel could not start (the
// client has been answered nothing yet).
func (u *Upgrades) tunnel(w http.ResponseWriter, r *http.Request, resp *http.Response, backend io.ReadWriteCloser, strip []string) error {
	h := w.Header()
	upgrade := resp.Header.Values("Upgrade")
	copyHeader(h, resp.Header)
	stripTargeted(h, strip)
	h["Upgrade"] = upgrade
	h["Connection"] = []string{"Upgrade"}
	rc := http.NewResponseController(w)
	w.WriteHeader(http.StatusSwitchingProtocols)
	conn, brw, err := rc.Hijack()
	if err != nil {
		u.unreserve()
		return errors.New("cannot take over the client connection: " + err.Error())
	}
	// What follows on the connection is the new protocol, not requests.
	connguard.Detach(r.Context())
	if !u.track(conn) {
		conn.Close()
		backend.Close()
		return nil
	}
	u.m.Upgrade(upgradeSwitched)
	defer u.untrack(conn)
	if err := brw.Flush(); err != nil { // the client left
		conn.Close()
		backend.Close()
		return nil
	}
	// Both directions run until one ends; then both connections close,
	// which ends the other. Bytes the server had already read past the
	// request (the client may send its first frame at once) are in brw.
	// A watchdog closes both when no byte moved either way for u.idle.
	var last atomic.Int64
	last.Store(time.Now().UnixNano())
	closeBoth := sync.OnceFunc(func() { conn.Close(); backend.Close() })
	var idle *time.Timer
	var ended atomic.Bool // the tunnel is over: the watchdog must not re-arm
	var idleMu sync.Mutex // orders re-arming against stopping
	idle = time.AfterFunc(u.idle, func() {
		idleMu.Lock()
		defer idleMu.Unlock()
		if ended.Load() {
			return
		}
		if quiet := time.Since(time.Unix(0, last.Load())); quiet < u.idle {
			idle.Reset(u.idle - quiet)
			return
		}
		u.log.Info("closed an idle upgraded connection", "path", r.URL.Path, "idle", u.idle.String())
		closeBoth()
	})
	defer func() {
		idleMu.Lock()
		ended.Store(true)
		idle.Stop()
		idleMu.Unlock()
	}()
	done := make(chan struct{}, 2)
	go func() {
		copyActive(backend, brw.Reader, &last)
		done <- struct{}{}
	}()
	go func() {
		copyActive(conn, backend, &last)
		done <- struct{}{}
	}()
	<-done
	closeBoth()
	<-done
	return nil
}

// copyFlushing copies an origin body to the client, flushing after every
// read, and cancels the exchange (through cancel) once no byte came for
// idle. It returns when the body ends or either side fails.
func copyFlushing(w http.ResponseWriter, body io.Reader, idle time.Duration, cancel context.CancelFunc) {
	t := time.AfterFunc(idle, cancel)
	defer t.Stop()
	rc := http.NewResponseController(w)
	buf := make([]byte, upgradeCopyBufferLen)
	for {
		n, err := body.Read(buf)
		if n > 0 {
			t.Reset(idle)
			if _, werr := w.Write(buf[:n]); werr != nil {
				return
			}
			_ = rc.Flush()
		}
		if err != nil {
			return
		}
	}
}

// copyActive copies src to dst until either fails, noting the time of
// every read that brought bytes in last.
func copyActive(dst io.Writer, src io.Reader, last *atomic.Int64) {
	buf := make([]byte, upgradeCopyBufferLen)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			last.Store(time.Now().UnixNano())
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// reserve takes a slot for a tunnel being set up, if one is free: open
// tunnels and handshakes in progress both count against max.
func (u *Upgrades) reserve() bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	if len(u.open)+u.pending >= u.max {
		return false
	}
	u.pending++
	return true
}

func (u *Upgrades) unreserve() {
	u.mu.Lock()
	u.pending--
	u.mu.Unlock()
}

// track turns a reserved slot into an open tunnel (false after Close: the
// slot is given back).
func (u *Upgrades) track(c net.Conn) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.pending--
	if u.closed {
		return false
	}
	u.open[c] = struct{}{}
	u.wg.Add(1) // under mu, so never after Close's Wait began
	u.m.UpgradedOpen.Inc()
	return true
}

// Hold counts c, a connection the caller relays itself (the sidecar's
// h2c pass-through), as an upgraded connection: against the same bound,
// in tiercache_upgraded_connections, and closed by Close at shutdown. ok
// is false when the bound is reached or Close has run; otherwise release
// ends the hold once the relay is over.
func (u *Upgrades) Hold(c net.Conn) (release func(), ok bool) {
	if !u.reserve() || !u.track(c) {
		return nil, false
	}
	return func() { u.untrack(c) }, true
}

func (u *Upgrades) untrack(c net.Conn) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if _, ok := u.open[c]; ok {
		delete(u.open, c)
		u.m.UpgradedOpen.Dec()
		u.wg.Done()
	}
}

// Close closes every open tunnel and refuses new ones; call it after the
// server has drained its requests. It waits (bounded by ctx) for the
// tunnels' goroutines to end.
func (u *Upgrades) Close(ctx context.Context) error {
	u.mu.Lock()
	u.closed = true
	for c := range u.open {
		c.Close()
	}
	n := len(u.open)
	u.mu.Unlock()
	if n > 0 {
		u.log.Info("closed upgraded connections at shutdown", "count", n)
	}
	done := make(chan struct{})
	go func() { u.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return errors.New("proxy: upgraded connections still closing: " + ctx.Err().Error())
	}
}

// offered reports whether protocol (the origin's Upgrade answer) is one of
// the protocols the client listed (names compare case-insensitively,
// versions included).
func offered(listed []string, protocol string) bool {
	protocol = strings.TrimSpace(protocol)
	if protocol == "" {
		return false
	}
	for _, v := range listed {
		for _, p := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(p), protocol) {
				return true
			}
		}
	}
	return false
}

// unsupported says why the sidecar cannot proxy r, or "" when it can.
// HTTP/2 is not spoken on the serving port: a client with prior knowledge
// (its preface arrives as "PRI * HTTP/2.0", which net/http hands to the
// handler) and gRPC, which needs HTTP/2 framing, get a clear error rather
// than a request forwarded in a form the origin cannot make sense of.
// gRPC-Web (application/grpc-web) works over HTTP/1.1 and is proxied.
func unsupported(r *http.Request) string {
	if r.ProtoMajor != 1 || r.Method == "PRI" {
		return "HTTP/2 is not supported on this port (prior-knowledge h2c, gRPC); use HTTP/1.1"
	}
	if r.Method == http.MethodPost {
		if ct := r.Header["Content-Type"]; len(ct) > 0 && isGRPC(ct[0]) {
			return "gRPC needs HTTP/2, which is not supported on this port; front the gRPC port without the cache"
		}
	}
	return ""
}

// isGRPC reports whether a Content-Type is gRPC proper (application/grpc
// or application/grpc+<codec>), not gRPC-Web.
func isGRPC(ct string) bool {
	const grpc = "application/grpc"
	if len(ct) < len(grpc) || !strings.EqualFold(ct[:len(grpc)], grpc) {
		return false
	}
	rest := ct[len(grpc):]
	return rest == "" || rest[0] == '+' || rest[0] == ';'
}

// refuse answers a request the sidecar cannot proxy: 505 for HTTP/2, 501
// otherwise, with the reason in the body and in one log line.
func (p *Proxy) refuse(w http.ResponseWriter, r *http.Request, why string) sent {
	status := http.StatusNotImplemented
	if r.ProtoMajor != 1 || r.Method == "PRI" {
		status = http.StatusHTTPVersionNotSupported
	}
	p.log.Info("refused a request the sidecar cannot proxy", "method", r.Method, "path", r.URL.Path, "proto", r.Proto, "why", why)
	p.m.Request(metrics.ResultError, metrics.LayerNone, 0)
	w.Header().Set("Connection", "close")
	return errorAnswer(w, r, "tiercache: "+why, status)
}
