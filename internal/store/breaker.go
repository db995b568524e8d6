package store

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/tiercache/tiercache/internal/store/l2"
)

// BreakerConfig tunes the L2 circuit breaker. Zero fields take the
// defaults noted.
type BreakerConfig struct {
	// FailureThreshold is the number of consecutive L2 failures that open
	// the breaker (default 5).
	FailureThreshold int
	// OpenFor is how long the breaker stays open before one probe call is
	// let through (default 500ms). Each failed probe doubles it, up to
	// MaxOpenFor; a successful probe resets it.
	OpenFor time.Duration
	// MaxOpenFor caps OpenFor's doubling (default 10s).
	MaxOpenFor time.Duration
}

// Breaker defaults.
const (
	DefaultFailureThreshold = 5
	DefaultOpenFor          = 500 * time.Millisecond
	DefaultMaxOpenFor       = 10 * time.Second
)

func (c BreakerConfig) withDefaults() BreakerConfig {
	if c.FailureThreshold == 0 {
		c.FailureThreshold = DefaultFailureThreshold
	}
	if c.OpenFor == 0 {
		c.OpenFor = DefaultOpenFor
	}
	if c.MaxOpenFor == 0 {
		c.MaxOpenFor = max(DefaultMaxOpenFor, c.OpenFor)
	}
	return c
}

func (c BreakerConfig) validate() []error {
	var errs []error
	if c.FailureThreshold < 0 {
		errs = append(errs, fmt.Errorf("store.breaker.failureThreshold: must be >= 0, 0 meaning %d (got %d)", DefaultFailureThreshold, c.FailureThreshold))
	}
	if c.OpenFor < 0 {
		errs = append(errs, fmt.Errorf("store.breaker.openFor: must be >= 0, 0 meaning %s (got %s)", DefaultOpenFor, c.OpenFor))
	}
	if c.MaxOpenFor < 0 {
		errs = append(errs, fmt.Errorf("store.breaker.maxOpenFor: must be >= 0, 0 meaning %s (got %s)", DefaultMaxOpenFor, c.MaxOpenFor))
	} else if c.MaxOpenFor > 0 && c.OpenFor > c.MaxOpenFor {
		errs = append(errs, fmt.Errorf("store.breaker.maxOpenFor: %s is below openFor (%s)", c.MaxOpenFor, c.OpenFor))
	}
	return errs
}

// breakerState is where the breaker is.
type breakerState uint8

const (
	// closed: every call goes to L2.
	closed breakerState = iota
	// open: no call goes to L2 until the open period ends.
	open
	// halfOpen: one probe call is out; every other call is refused until
	// its outcome is known.
	halfOpen
)

func (s breakerState) String() string {
	switch s {
	case closed:
		return "closed"
	case open:
		return "open"
	case halfOpen:
		return "half-open"
	}
	return fmt.Sprintf("breakerState(%d)", uint8(s))
}

// ticket is what allow hands out with a call it lets through; done takes it
// back with the call's outcome.
type ticket uint8

const (
	// regular: a call made while the breaker was closed.
	regular ticket = iota + 1
	// probe: the one call made in half-open; its outcome decides.
	probe
)

// outcome is what one L2 call says about L2's health.
type outcome uint8

const (
	// success: L2 answered (a miss and a value it could not use included).
	success outcome = iota
	// failure: L2 could not answer in time or at all (l2.IsUnavailable).
	failure
	// neutral: the caller gave up first; says nothing about L2.
	neutral
)

// classify turns an L2 call's error into an outcome. parent is the
// caller's context before our Timeout was applied: a call cut short by its
// caller is neutral, while one that hit our own Timeout is a failure.
func classify(parent context.Context, err error) outcome {
	switch {
	case err == nil, errors.Is(err, l2.ErrNotFound):
		return success
	case parent.Err() != nil:
		return neutral
	case l2.IsUnavailable(err):
		return failure
	}
	return success
}

// breaker is the L2 circuit breaker: closed → open after FailureThreshold
// consecutive failures; open → half-open once OpenFor has passed, when the
// next call becomes the single probe; half-open → closed on the probe's
// success, or → open again with OpenFor doubled (capped) on its failure.
//
// Transitions happen in allow and done only, under mu, and are reported to
// onChange (which sets the gauge and logs), so that each change is
// reported exactly once however many requests see it.
type breaker struct {
	cfg      BreakerConfig
	now      func() time.Time
	onChange func(from, to breakerState, openFor time.Duration)

	mu       sync.Mutex
	state    breakerState
	failures int           // consecutive failures while closed
	openFor  time.Duration // length of the current (or next) open period
	until    time.Time     // end of the open period
}

func newBreaker(cfg BreakerConfig, now func() time.Time, onChange func(from, to breakerState, openFor time.Duration)) *breaker {
	cfg = cfg.withDefaults()
	if onChange == nil {
		onChange = func(breakerState, breakerState, time.Duration) {}
	}
	return &breaker{cfg: cfg, now: now, onChange: onChange, openFor: cfg.OpenFor}
}

// allow says whether a call may go to L2 now and, if so, returns the
// ticket to hand to done. A refused call must not touch L2.
func (b *breaker) allow() (ticket, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch b.state {
	case closed:
		return regular, true
	case open:
		if b.now().Before(b.until) {
			return 0, false
		}
		b.set(halfOpen)
		return probe, true
	}
	return 0, false // half-open: the probe is out
}

// refusing reports whether allow would refuse a call now, without taking
// the probe: Set uses it to drop a write at once rather than queue it.
func (b *breaker) refusing() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch b.state {
	case open:
		return b.now().Before(b.until)
	case halfOpen:
		return true
	}
	return false
}

// done records the outcome of a call that allow let through.
func (b *breaker) done(t ticket, o outcome) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if t == probe {
		if b.state != halfOpen {
			return // cannot happen: only the probe leaves half-open
		}
		switch o {
		case success:
			b.failures = 0
			b.openFor = b.cfg.OpenFor
			b.set(closed)
		case failure:
			b.openFor = min(2*b.openFor, b.cfg.MaxOpenFor)
			b.until = b.now().Add(b.openFor)
			b.set(open)
		default:
			// The probe's caller gave up: no verdict, so the next call
			// probes again, at once.
			b.until = b.now()
			b.set(open)
		}
		return
	}
	// A call let through while closed. Outcomes arriving after the breaker
	// opened (calls that were already out) change nothing.
	if b.state != closed {
		return
	}
	switch o {
	case success:
		b.failures = 0
	case failure:
		b.failures++
		if b.failures >= b.cfg.FailureThreshold {
			b.failures = 0
			b.openFor = b.cfg.OpenFor
			b.until = b.now().Add(b.openFor)
			b.set(open)
		}
	}
}

// set changes state (mu held) and reports the change.
func (b *breaker) set(s breakerState) {
	if s == b.state {
		return
	}
	from := b.state
	b.state = s
	b.onChange(from, s, b.openFor)
}
