package sidecar

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"

	"github.com/tiercache/tiercache/internal/connguard"
	"github.com/tiercache/tiercache/internal/metrics"
	"github.com/tiercache/tiercache/internal/proxy"
)

// HTTP/2 with prior knowledge (h2c, and so gRPC on a plaintext port) is
// passed through: a connection that opens with the HTTP/2 connection
// preface is relayed byte for byte to the origin's port, uncached. The
// sidecar does not speak HTTP/2 itself. Caching HTTP/2 would mean
// terminating it, and an app that serves gRPC wants its own HTTP/2
// behaviour (flow control, trailers, keepalive pings) end to end.
//
// Detection costs HTTP/1.1 nothing: net/http reads the preface's first
// line and empty line ("PRI * HTTP/2.0\r\n\r\n") as a request with
// ProtoMajor 2 and hands it to the handler, connguard has seen whether
// that was the connection's first header block, and the rest of the
// preface ("SM\r\n\r\n") and the client's first frames wait in the
// server's buffer. The handler takes the connection over (Hijack), checks
// the rest of the preface, writes the preface to a new origin connection
// and copies bytes both ways. net/http accepts that line only in that
// form, but for bare LF line ends; the origin always gets the preface
// as RFC 9113 §3.4 spells it.

// protoH2C is the protocol label of h2c pass-through connections.
const protoH2C = "h2c"

// Results of tiercache_passthrough_connections_total.
const (
	passRelayed = "relayed"
	passRefused = "refused"
	passError   = "error"
)

const (
	// prefaceLine is what net/http read as the "PRI" request; prefaceRest
	// follows it in the buffer.
	prefaceLine = "PRI * HTTP/2.0\r\n\r\n"
	prefaceRest = "SM\r\n\r\n"
	// passDialTimeout bounds the connection to the origin; passPrefaceWait
	// bounds the wait for the rest of a preface the client split.
	passDialTimeout = 5 * time.Second
	passPrefaceWait = 10 * time.Second
	passBufferLen   = 32 << 10
)

// passthrough relays h2c connections to the origin. Its connections are
// held by the Upgrades of the data plane: they count against
// --max-upgraded-connections and in tiercache_upgraded_connections, and
// are closed with the WebSockets at shutdown, after requests drained.
type passthrough struct {
	origin string // host:port
	idle   time.Duration
	up     *proxy.Upgrades
	m      *metrics.Metrics
	log    *slog.Logger
	dial   func(ctx context.Context, network, addr string) (net.Conn, error)
}

// isPreface reports whether r is the first line of an HTTP/2 preface that
// opened its connection. The checks are ordered cheapest first: an
// HTTP/1.1 request stops at the first.
func isPreface(r *http.Request) bool {
	return r.ProtoMajor == 2 && r.Method == "PRI" && connguard.OpenedWithPreface(r.Context())
}

// ServeHTTP takes over the connection r came on and relays it to the
// origin until either side ends it, it is idle for p.idle, or the sidecar
// shuts down.
func (p *passthrough) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		p.m.Passthrough(protoH2C, passError)
		p.log.Warn("h2c pass-through: cannot take over the client connection", "err", err)
		http.Error(w, "tiercache: cannot pass HTTP/2 through", http.StatusInternalServerError)
		return
	}
	// What follows on the connection is HTTP/2 frames, not requests.
	connguard.Detach(r.Context())
	defer conn.Close()
	client := brw.Reader
	_ = conn.SetDeadline(time.Now().Add(passPrefaceWait))
	if rest, err := client.Peek(len(prefaceRest)); err != nil || string(rest) != prefaceRest {
		p.m.Passthrough(protoH2C, passError)
		p.log.Info("h2c pass-through: the client's HTTP/2 preface is broken; closing", "remote", conn.RemoteAddr().String())
		return
	}
	_ = conn.SetDeadline(time.Time{})
	release, ok := p.up.Hold(conn)
	if !ok {
		p.m.Passthrough(protoH2C, passRefused)
		p.log.Warn("refused an h2c connection: too many upgraded connections open, or shutting down")
		goAway(conn, http2.ErrCodeRefusedStream, "tiercache: too many upgraded and HTTP/2 connections open; retry")
		return
	}
	defer release()
	ctx, cancel := context.WithTimeout(r.Context(), passDialTimeout)
	origin, err := p.dial(ctx, "tcp", p.origin)
	cancel()
	if err == nil {
		_, err = io.WriteString(origin, prefaceLine)
		if err != nil {
			origin.Close()
		}
	}
	if err != nil {
		p.m.Passthrough(protoH2C, passError)
		p.log.Warn("h2c pass-through: origin unavailable", "origin", p.origin, "err", err)
		goAway(conn, http2.ErrCodeInternal, "tiercache: origin unavailable")
		return
	}
	defer origin.Close()
	p.m.Passthrough(protoH2C, passRelayed)
	relay(conn, client, origin, p.idle)
}

// goAway answers a client whose connection is not relayed the way an
// HTTP/2 server refuses one: its SETTINGS (the server preface), then
// GOAWAY with no stream processed, so that the client fails at once with
// why, and may retry. Then it half-closes and reads what the client still
// sends for a moment (a lingering close, as net/http's): closing with
// unread bytes would reset the connection, and the client could lose the
// GOAWAY. Bounded by passPrefaceWait and goAwayLinger.
func goAway(c net.Conn, code http2.ErrCode, why string) {
	_ = c.SetWriteDeadline(time.Now().Add(passPrefaceWait))
	bw := bufio.NewWriter(c)
	f := http2.NewFramer(bw, nil)
	if f.WriteSettings() != nil || f.WriteGoAway(0, code, []byte(why)) != nil || bw.Flush() != nil {
		return
	}
	if cw, ok := c.(interface{ CloseWrite() error }); ok && cw.CloseWrite() == nil {
		_ = c.SetReadDeadline(time.Now().Add(goAwayLinger))
		_, _ = io.Copy(io.Discard, io.LimitReader(c, goAwayDrain))
	}
}

// A refused client's bytes are read for at most goAwayLinger, and at most
// goAwayDrain of them.
const (
	goAwayLinger = 500 * time.Millisecond
	goAwayDrain  = 256 << 10
)

// relay copies client (the rest of conn, starting with what the server
// had buffered) to origin and origin to conn until both directions end.
// A direction that reaches the end of its input half-closes its output,
// as a TCP relay does; one that fails closes both connections, and so
// does a watchdog once no byte moved either way for idle.
func relay(conn net.Conn, client io.Reader, origin net.Conn, idle time.Duration) {
	var last atomic.Int64
	last.Store(time.Now().UnixNano())
	closeBoth := sync.OnceFunc(func() { conn.Close(); origin.Close() })
	var mu sync.Mutex // orders re-arming the watchdog against stopping it
	ended := false
	var watchdog *time.Timer
	watchdog = time.AfterFunc(idle, func() {
		mu.Lock()
		defer mu.Unlock()
		if ended {
			return
		}
		if quiet := time.Since(time.Unix(0, last.Load())); quiet < idle {
			watchdog.Reset(idle - quiet)
			return
		}
		closeBoth()
	})
	defer func() {
		mu.Lock()
		ended = true
		watchdog.Stop()
		mu.Unlock()
		closeBoth()
	}()
	done := make(chan struct{}, 2)
	pipe := func(dst net.Conn, src io.Reader) {
		defer func() { done <- struct{}{} }()
		buf := make([]byte, passBufferLen)
		for {
			n, err := src.Read(buf)
			if n > 0 {
				last.Store(time.Now().UnixNano())
				if _, werr := dst.Write(buf[:n]); werr != nil {
					closeBoth()
					return
				}
			}
			if err == io.EOF {
				if cw, ok := dst.(interface{ CloseWrite() error }); ok && cw.CloseWrite() == nil {
					return
				}
				closeBoth()
				return
			}
			if err != nil {
				closeBoth()
				return
			}
		}
	}
	go pipe(origin, client)
	go pipe(conn, origin)
	<-done
	<-done
}
