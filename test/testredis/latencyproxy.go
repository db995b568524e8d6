package testredis

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Bounds of a LatencyProxy.
const (
	// proxyMaxConns: connections beyond this many are accepted and closed
	// at once.
	proxyMaxConns = 512
	// proxyChunk is the most bytes read at once from either side.
	proxyChunk = 16 << 10
	// proxyQueue is how many chunks may wait out their delay per direction
	// of one connection; a full queue stops reading from that side
	// (backpressure), so a connection holds at most proxyQueue×proxyChunk
	// bytes per direction.
	proxyQueue = 64
	// proxyMaxDelay caps SetDelay.
	proxyMaxDelay = 30 * time.Second
	// proxyDialTimeout bounds the dial to the target.
	proxyDialTimeout = 5 * time.Second
	// proxyCloseTimeout bounds Close's wait for the connection goroutines.
	proxyCloseTimeout = 5 * time.Second
)

// LatencyProxy is a TCP proxy on a loopback port in front of one target
// address, for injecting network faults between a client and a server
// (Redis, typically): a fixed delay per direction, a blackhole (connections
// are accepted but nothing is ever answered) and cutting every connection.
// Each accepted connection gets its own connection to the target, dialled
// when it is accepted.
//
// It is bounded: at most 512 connections, 1 MiB queued per direction of
// each, delays of at most 30 s. Close stops it and waits for every goroutine
// it started. It is safe for concurrent use.
//
// Why not toxiproxy: it is a server driven over its own HTTP API (or a
// library that embeds that server with its API, metrics and logging
// stack); these tests need three faults (delay, blackhole, cut) set
// synchronously from the test goroutine, bounded and owned by the test,
// which is this file.
type LatencyProxy struct {
	target string
	ln     net.Listener
	ctx    context.Context // ended by Close: cancels dials and delays
	cancel context.CancelFunc

	toServer  atomic.Int64 // delay of client → target bytes, ns
	toClient  atomic.Int64 // delay of target → client bytes, ns
	blackhole atomic.Bool

	mu     sync.Mutex
	links  map[*link]struct{}
	closed bool
	wg     sync.WaitGroup
}

// NewLatencyProxy listens on 127.0.0.1:0 and forwards every connection to
// target (host:port), with no delay until SetDelay.
func NewLatencyProxy(target string) (*LatencyProxy, error) {
	if _, _, err := net.SplitHostPort(target); err != nil {
		return nil, fmt.Errorf("testredis: proxy target %q: %w", target, err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("testredis: proxy: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &LatencyProxy{target: target, ln: ln, ctx: ctx, cancel: cancel, links: make(map[*link]struct{})}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// StartLatencyProxy is NewLatencyProxy for tests: it fails the test on
// error and closes the proxy when the test ends.
func StartLatencyProxy(t testing.TB, target string) *LatencyProxy {
	t.Helper()
	p, err := NewLatencyProxy(target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("testredis: %v", err)
		}
	})
	return p
}

// Addr is the proxy's host:port, for the client to dial instead of the
// target.
func (p *LatencyProxy) Addr() string { return p.ln.Addr().String() }

// SetDelay makes every byte read from one side wait d before it is
// written to the other: toServer for the client's bytes, toClient for the
// target's (a request/reply exchange then takes toServer+toClient longer).
// The delay is fixed, not cumulative: bytes read 1 ms apart are written
// 1 ms apart. It applies to bytes read from now on; negative means 0, and
// delays are capped at 30 s.
func (p *LatencyProxy) SetDelay(toServer, toClient time.Duration) {
	clamp := func(d time.Duration) int64 { return int64(min(max(d, 0), proxyMaxDelay)) }
	p.toServer.Store(clamp(toServer))
	p.toClient.Store(clamp(toClient))
}

// SetBlackhole turns the blackhole on or off. While it is on, new
// connections are accepted but never connected to the target (what the
// client sends is read and discarded, and nothing is ever answered, even
// after the blackhole is turned off), and whatever either side of an
// existing connection sends is discarded: a peer that vanished without a
// word. Bytes read before it was turned on are still delivered.
func (p *LatencyProxy) SetBlackhole(on bool) { p.blackhole.Store(on) }

// CutAll closes every current connection, both sides, and returns how many
// there were. New connections are accepted as before.
func (p *LatencyProxy) CutAll() int {
	p.mu.Lock()
	links := make([]*link, 0, len(p.links))
	for l := range p.links {
		links = append(links, l)
	}
	p.mu.Unlock()
	for _, l := range links {
		l.close()
	}
	return len(links)
}

// Conns is the number of client connections currently open.
func (p *LatencyProxy) Conns() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.links)
}

// Close stops accepting, closes every connection and waits (at most 5 s)
// for the proxy's goroutines to end. It may be called more than once.
func (p *LatencyProxy) Close() error {
	p.mu.Lock()
	already := p.closed
	p.closed = true
	p.mu.Unlock()
	if already {
		return nil
	}
	p.cancel()
	err := p.ln.Close()
	p.CutAll()
	done := make(chan struct{})
	go func() { p.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(proxyCloseTimeout):
		return fmt.Errorf("testredis: proxy for %s: goroutines still running %s after Close", p.target, proxyCloseTimeout)
	}
	if err != nil && !errors.Is(err, net.ErrClosed) {
		return fmt.Errorf("testredis: proxy: %w", err)
	}
	return nil
}

func (p *LatencyProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if p.ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return
			}
			// A transient failure (out of file descriptors, …): back off
			// a little rather than spin.
			select {
			case <-p.ctx.Done():
				return
			case <-time.After(5 * time.Millisecond):
			}
			continue
		}
		l := &link{client: c, dead: make(chan struct{})}
		p.mu.Lock()
		if p.closed || len(p.links) >= proxyMaxConns {
			p.mu.Unlock()
			c.Close()
			continue
		}
		p.links[l] = struct{}{}
		p.wg.Add(1)
		p.mu.Unlock()
		go p.serve(l)
	}
}

// serve runs one connection until either side closes it, CutAll or Close.
func (p *LatencyProxy) serve(l *link) {
	defer p.wg.Done()
	defer func() {
		l.close()
		p.mu.Lock()
		delete(p.links, l)
		p.mu.Unlock()
	}()
	if p.blackhole.Load() {
		p.discard(l.client)
		return
	}
	d := net.Dialer{Timeout: proxyDialTimeout}
	server, err := d.DialContext(p.ctx, "tcp", p.target)
	if err != nil {
		return // the client sees its connection closed
	}
	if !l.setServer(server) {
		return // cut while dialling
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); p.pipe(l, l.client, server, &p.toServer) }()
	go func() { defer wg.Done(); p.pipe(l, server, l.client, &p.toClient) }()
	wg.Wait()
}

// discard reads c until it fails (the client closes, or the link is cut).
func (p *LatencyProxy) discard(c net.Conn) {
	buf := make([]byte, proxyChunk)
	for {
		if _, err := c.Read(buf); err != nil {
			return
		}
	}
}

type chunk struct {
	b   []byte
	due time.Time
}

// pipe copies src to dst, each chunk delayed by *delay as it was when the
// chunk was read. It ends, closing the link, when either side fails.
func (p *LatencyProxy) pipe(l *link, src, dst net.Conn, delay *atomic.Int64) {
	q := make(chan chunk, proxyQueue)
	written := make(chan struct{})
	go func() {
		defer close(written)
		failed := false
		var t *time.Timer
		defer func() {
			if t != nil {
				t.Stop()
			}
		}()
		for c := range q { // drains q until the reader closes it
			if failed {
				continue
			}
			if wait := time.Until(c.due); wait > 0 {
				if t == nil {
					t = time.NewTimer(wait)
				} else {
					t.Reset(wait)
				}
				select {
				case <-t.C:
				case <-l.dead:
					failed = true
					continue
				}
			}
			if _, err := dst.Write(c.b); err != nil {
				failed = true
				l.close() // unblocks the reader
			}
		}
	}()
	buf := make([]byte, proxyChunk)
	for {
		n, err := src.Read(buf)
		if n > 0 && !p.blackhole.Load() {
			c := chunk{b: append([]byte(nil), buf[:n]...), due: time.Now().Add(time.Duration(delay.Load()))}
			select {
			case q <- c:
			case <-l.dead:
			}
		}
		if err != nil {
			break
		}
	}
	close(q)
	<-written
	l.close()
}

// link is one proxied connection: the client's, and ours to the target
// once dialled.
type link struct {
	client net.Conn
	dead   chan struct{} // closed by close

	mu     sync.Mutex
	server net.Conn
	closed bool
}

// setServer attaches the target connection; false (and server closed)
// when the link was closed meanwhile.
func (l *link) setServer(server net.Conn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		server.Close()
		return false
	}
	l.server = server
	return true
}

func (l *link) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return
	}
	l.closed = true
	close(l.dead)
	l.client.Close()
	if l.server != nil {
		l.server.Close()
	}
}
