// Package backoff owns how Tiercache spaces retries and polls: the control
// plane client's reconnects, L2's resubscribes and a replica's polls for
// another's fill all take their delays from an Exponential.
//
// It is written here rather than taken from k8s.io/apimachinery's
// wait.Backoff or cenkalti/backoff because both draw their jitter from a
// global random source and step through state: a delay here is a pure
// function of the attempt number and a random value the caller passes, so
// that a test can pin it (STYLE: inject randomness), and wait.Backoff's
// jitter only ever lengthens a delay, where ours shortens it so that Max
// stays a real bound.
package backoff

import (
	"context"
	"time"
)

// Exponential is capped exponential backoff: the delay before retry
// number n (0 for the first) is Initial·Multiplier^n, capped at Max, of
// which a random share of up to Jitter is taken away.
type Exponential struct {
	Initial time.Duration
	Max     time.Duration
	// Multiplier per attempt, at least 1.
	Multiplier float64
	// Jitter in [0, 1] is the largest share of a delay taken away at
	// random: with 0.5, a delay d becomes one in [d/2, d), so that
	// clients that failed together do not retry together; 0 is none.
	Jitter float64
}

// Delay is the wait before retry number attempt (0 for the first), given
// r in [0, 1) (the caller's random source; any value without Jitter): d
// less (1-r)·Jitter of it, where d is the capped exponential delay.
func (e Exponential) Delay(attempt int, r float64) time.Duration {
	d := float64(e.Initial)
	for i := 0; i < attempt && d < float64(e.Max); i++ {
		d *= e.Multiplier
	}
	d = min(d, float64(e.Max))
	return time.Duration(d - (1-r)*e.Jitter*d)
}

// Sleep waits d, or until ctx ends: it reports whether d passed.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
