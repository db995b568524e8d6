// Package coalesce makes concurrent requests for one key share one fetch,
// as groupcache's singleflight does, with what a streaming cache needs
// besides: the fetch may tell its waiters its result before it returns
// (a cache fill publishes the stored response before its own client has
// the last byte), it may let them stream a body while it is still being
// written, and a waiter bounds its own wait.
//
// The first request for a key leads its Flight (Join returns a Lead); the
// others wait on it (Flight.Wait). A Flight ends once, through its Lead:
// the first Publish counts, and a later one (a timer racing the fetch's
// own publish) does nothing. Ending removes the Flight from its Group, so
// the next request for the key starts afresh. A Lead's owner calls End
// when it returns, which ends the Flight with the zero result unless it
// ended already or the fetch went on without the owner (Detach).
//
// R is what a Flight leaves for its waiters (its zero value: nothing,
// fetch for yourselves); S is what a streaming Lead shows them. Nothing
// here knows HTTP: the proxy decides what R and S hold.
package coalesce

import (
	"context"
	"sync"
	"time"
)

// Group tracks the flights in progress, one per key. The zero Group is
// ready to use; it must not be copied after first use.
type Group[R, S any] struct {
	mu sync.Mutex
	m  map[string]*Flight[R, S]

	// BeforeJoin, when set, runs at the start of every Join: a test seam
	// (nil in production) that lets a test complete another fetch between
	// a request's miss and its joining a flight, the race a leader's
	// re-check is for.
	BeforeJoin func(key string)
	// Waiting, when set, runs as a request begins to wait on key's flight
	// (Wait): a test seam (nil in production) that lets a test tell when a
	// herd has gathered.
	Waiting func(key string)
}

// Flight is one fetch in progress that other requests for its key wait on.
type Flight[R, S any] struct {
	g   *Group[R, S]
	key string

	done chan struct{} // closed, with res set, when the flight ends
	once sync.Once
	res  R

	started   chan struct{} // closed, with stream set, when the lead streams
	startOnce sync.Once
	stream    S
}

// Join returns the flight for key, and its Lead when the caller starts
// it (nil when the caller is to wait on a flight already running).
func (g *Group[R, S]) Join(key string) (*Flight[R, S], *Lead[R, S]) {
	if g.BeforeJoin != nil {
		g.BeforeJoin(key)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if f, ok := g.m[key]; ok {
		return f, nil
	}
	if g.m == nil {
		g.m = make(map[string]*Flight[R, S])
	}
	f := &Flight[R, S]{g: g, key: key, done: make(chan struct{}), started: make(chan struct{})}
	g.m[key] = f
	return f, &Lead[R, S]{f: f}
}

// Running returns the flight in progress for key, or nil; it never starts
// one.
func (g *Group[R, S]) Running(key string) *Flight[R, S] {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.m[key]
}

// Waited is how a wait on a flight ended.
type Waited uint8

const (
	// Ended: the flight ended; Result is what it left.
	Ended Waited = iota
	// Streaming: the lead is streaming and the flight has not ended;
	// Stream is what it shows.
	Streaming
	// TimedOut: the flight neither ended nor streamed within the wait's
	// timeout. The flight goes on; the waiter no longer waits for it.
	TimedOut
	// Canceled: the waiter's context ended first. The flight goes on.
	Canceled
)

// Wait waits for f to end or stream, for at most timeout and while ctx
// lasts. A flight that ended as it began streaming counts as Ended: its
// result is what counts. A waiter that gives up never affects the flight.
func (f *Flight[R, S]) Wait(ctx context.Context, timeout time.Duration) Waited {
	if f.g.Waiting != nil {
		f.g.Waiting(f.key)
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case <-f.done:
		return Ended
	case <-f.started:
		select {
		case <-f.done:
			return Ended
		default:
			return Streaming
		}
	case <-timer.C:
		return TimedOut
	case <-ctx.Done():
		return Canceled
	}
}

// Result is what the flight left for its waiters; valid once Wait
// returned Ended.
func (f *Flight[R, S]) Result() R { return f.res }

// Stream is what the lead shows its waiters while it streams; valid once
// Wait returned Streaming.
func (f *Flight[R, S]) Stream() S { return f.stream }

// Lead is the leader's hold on a flight: the one way it ends. A nil *Lead
// is a fetch on its own, which nobody waits on: its methods do nothing.
type Lead[R, S any] struct {
	f *Flight[R, S]
	// detached: the fetch went on without the owner, which publishes;
	// the owner's End must not. Only the owner's goroutine reads and
	// writes it.
	detached bool
}

// Publish ends the flight with res, unless it has ended already, and
// removes it from its group so that later requests start afresh.
func (l *Lead[R, S]) Publish(res R) {
	if l == nil {
		return
	}
	f := l.f
	f.once.Do(func() {
		f.res = res
		f.g.mu.Lock()
		if f.g.m[f.key] == f {
			delete(f.g.m, f.key)
		}
		f.g.mu.Unlock()
		close(f.done)
	})
}

// Stream shows the waiters s (a body being written, to follow as it
// grows) before the flight ends; only the first call counts.
func (l *Lead[R, S]) Stream(s S) {
	if l == nil {
		return
	}
	f := l.f
	f.startOnce.Do(func() {
		f.stream = s
		close(f.started)
	})
}

// Detach tells the lead that the fetch went on without its owner (on a
// goroutine of its own, which publishes): End no longer publishes.
func (l *Lead[R, S]) Detach() {
	if l != nil {
		l.detached = true
	}
}

// End is the owner's last word: the zero result for the waiters (they
// fetch for themselves), unless a Publish came first or the fetch was
// detached.
func (l *Lead[R, S]) End() {
	if l != nil && !l.detached {
		var zero R
		l.Publish(zero)
	}
}
