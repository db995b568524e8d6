package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/tiercache/tiercache/internal/store/l2"
)

// breakerRun drives a breaker through a table case's steps.
type breakerRun struct {
	t     *testing.T
	b     *breaker
	clk   *clock
	held  []ticket // tickets handed out and not yet done, oldest first
	moves []string // transitions reported to onChange
}

// step is one thing that happens to the breaker, with what must follow.
type step func(r *breakerRun)

// call makes one call that allow must let through and reports o.
func call(o outcome) step {
	return func(r *breakerRun) {
		r.t.Helper()
		tk, ok := r.b.allow()
		if !ok {
			r.t.Fatalf("allow refused a call in state %v", r.b.current())
		}
		r.b.done(tk, o)
	}
}

var (
	succeed = call(success)
	fail    = call(failure)
	cancel  = call(neutral)
)

// refused: allow must refuse.
func refused(r *breakerRun) {
	r.t.Helper()
	if tk, ok := r.b.allow(); ok {
		r.t.Fatalf("allow let a call through (ticket %d) in state %v", tk, r.b.current())
	}
}

// start: a call is let through and stays out until finish.
func start(want ticket) step {
	return func(r *breakerRun) {
		r.t.Helper()
		tk, ok := r.b.allow()
		if !ok || tk != want {
			r.t.Fatalf("allow = %d, %v; want ticket %d", tk, ok, want)
		}
		r.held = append(r.held, tk)
	}
}

// finish reports o for the oldest call out.
func finish(o outcome) step {
	return func(r *breakerRun) {
		r.b.done(r.held[0], o)
		r.held = r.held[1:]
	}
}

func wait(d time.Duration) step { return func(r *breakerRun) { r.clk.Advance(d) } }

func is(s breakerState) step {
	return func(r *breakerRun) {
		r.t.Helper()
		if got := r.b.current(); got != s {
			r.t.Fatalf("state %v, want %v", got, s)
		}
	}
}

func repeat(n int, s step) step {
	return func(r *breakerRun) {
		for range n {
			s(r)
		}
	}
}

func TestBreakerStateMachine(t *testing.T) {
	cfg := BreakerConfig{FailureThreshold: 3, OpenFor: 500 * time.Millisecond, MaxOpenFor: 1500 * time.Millisecond}
	opened := repeat(3, fail)
	tests := map[string]struct {
		steps []step
		moves []string // every transition, in order
	}{
		"successes keep it closed": {
			steps: []step{repeat(10, succeed), is(closed)},
		},
		"consecutive failures below the threshold keep it closed": {
			steps: []step{fail, fail, is(closed), succeed},
		},
		"a success starts the count of consecutive failures again": {
			steps: []step{fail, fail, succeed, fail, fail, is(closed)},
		},
		"calls their callers cancelled neither count nor start the count again": {
			steps: []step{fail, fail, repeat(5, cancel), is(closed), fail, is(open)},
			moves: []string{"closed→open"},
		},
		"the threshold of consecutive failures opens it and calls are refused": {
			steps: []step{opened, is(open), repeat(10, refused)},
			moves: []string{"closed→open"},
		},
		"it stays open until OpenFor has passed": {
			steps: []step{opened, wait(499 * time.Millisecond), refused, is(open)},
			moves: []string{"closed→open"},
		},
		"after OpenFor exactly one probe goes through while the others are refused": {
			steps: []step{opened, wait(500 * time.Millisecond), start(probe), is(halfOpen), repeat(5, refused),
				wait(time.Hour), refused},
			moves: []string{"closed→open", "open→half-open"},
		},
		"a successful probe closes it": {
			steps: []step{opened, wait(500 * time.Millisecond), start(probe), finish(success), is(closed), succeed},
			moves: []string{"closed→open", "open→half-open", "half-open→closed"},
		},
		"a failed probe reopens it for twice as long": {
			steps: []step{opened, wait(500 * time.Millisecond), start(probe), finish(failure), is(open),
				wait(999 * time.Millisecond), refused, wait(time.Millisecond), start(probe)},
			moves: []string{"closed→open", "open→half-open", "half-open→open", "open→half-open"},
		},
		"the open period doubles no further than MaxOpenFor": {
			steps: []step{opened,
				wait(500 * time.Millisecond), start(probe), finish(failure), // now 1s
				wait(time.Second), start(probe), finish(failure), // now 1.5s, not 2s
				wait(1500 * time.Millisecond), start(probe), finish(failure), // still 1.5s
				wait(1499 * time.Millisecond), refused, wait(time.Millisecond), start(probe)},
		},
		"closing resets the open period": {
			steps: []step{opened,
				wait(500 * time.Millisecond), start(probe), finish(failure),
				wait(time.Second), start(probe), finish(success),
				opened, wait(500 * time.Millisecond), start(probe)},
		},
		"a probe its caller cancelled lets the next call probe at once": {
			steps: []step{opened, wait(500 * time.Millisecond), start(probe), finish(neutral), is(open),
				start(probe), finish(success), is(closed)},
			moves: []string{"closed→open", "open→half-open", "half-open→open", "open→half-open", "half-open→closed"},
		},
		"calls made before it opened change nothing when they end": {
			steps: []step{start(regular), start(regular), opened, finish(success), finish(failure), is(open),
				wait(500 * time.Millisecond), start(probe)},
			moves: []string{"closed→open", "open→half-open"},
		},
		"a call made before it opened does not end the probe": {
			steps: []step{start(regular), opened, wait(500 * time.Millisecond), start(probe), finish(success),
				is(halfOpen), refused},
			moves: []string{"closed→open", "open→half-open"},
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			clk := newClock()
			r := &breakerRun{t: t, clk: clk}
			r.b = newBreaker(cfg, clk.Now, func(from, to breakerState, _ time.Duration) {
				r.moves = append(r.moves, from.String()+"→"+to.String())
			})
			for _, s := range tc.steps {
				s(r)
			}
			if tc.moves != nil && fmt.Sprint(r.moves) != fmt.Sprint(tc.moves) {
				t.Fatalf("transitions %v, want %v", r.moves, tc.moves)
			}
		})
	}
}

func TestBreakerDefaults(t *testing.T) {
	got := BreakerConfig{}.withDefaults()
	want := BreakerConfig{FailureThreshold: 5, OpenFor: 500 * time.Millisecond, MaxOpenFor: 10 * time.Second}
	if got != want {
		t.Fatalf("defaults %+v, want %+v", got, want)
	}
	if got := (BreakerConfig{OpenFor: time.Minute}).withDefaults().MaxOpenFor; got != time.Minute {
		t.Fatalf("MaxOpenFor defaults to %s under an OpenFor of 1m, want 1m", got)
	}
}

func TestClassify(t *testing.T) {
	live := context.Background()
	done, cancel := context.WithCancel(context.Background())
	cancel()
	tests := map[string]struct {
		parent context.Context
		err    error
		want   outcome
	}{
		"an answer is a success":                              {live, nil, success},
		"a miss is a success":                                 {live, fmt.Errorf("x: %w", l2.ErrNotFound), success},
		"our own timeout is a failure":                        {live, fmt.Errorf("l2: get: %w", context.DeadlineExceeded), failure},
		"a refused connection is a failure":                   {live, &net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}, failure},
		"a connection closed under us is a failure":           {live, io.EOF, failure},
		"the caller's cancellation says nothing about L2":     {done, context.Canceled, neutral},
		"the caller's deadline says nothing about L2":         {done, context.DeadlineExceeded, neutral},
		"an error Redis answered with means Redis is working": {live, errors.New("WRONGTYPE Operation against a key"), success},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := classify(tc.parent, tc.err); got != tc.want {
				t.Fatalf("classify(%v) = %d, want %d", tc.err, got, tc.want)
			}
		})
	}
}
