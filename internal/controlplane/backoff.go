package controlplane

import (
	"fmt"
	"time"

	"github.com/tiercache/tiercache/internal/backoff"
)

// Backoff spaces the Client's reconnection attempts: the n-th consecutive
// failure waits Initial*Multiplier^n capped at Max, jittered down by up to
// half so that sidecars restarted together do not reconnect together.
type Backoff struct {
	// Initial delay (default 250ms).
	Initial time.Duration
	// Max delay (default 15s).
	Max time.Duration
	// Multiplier per failure (default 2).
	Multiplier float64
}

func (b Backoff) withDefaults() Backoff {
	if b.Initial == 0 {
		b.Initial = 250 * time.Millisecond
	}
	if b.Max == 0 {
		b.Max = 15 * time.Second
	}
	if b.Multiplier == 0 {
		b.Multiplier = 2
	}
	return b
}

func (b Backoff) validate() error {
	switch {
	case b.Initial < 0:
		return fmt.Errorf("backoff.initial: must be >= 0 (got %s)", b.Initial)
	case b.Max < b.Initial:
		return fmt.Errorf("backoff.max: must be >= backoff.initial = %s (got %s)", b.Initial, b.Max)
	case b.Multiplier < 1:
		return fmt.Errorf("backoff.multiplier: must be >= 1 (got %g)", b.Multiplier)
	}
	return nil
}

// Delay is the wait before retry number attempt (0 for the first) given a
// random r in [0, 1): a value in [d/2, d) where d is the capped
// exponential delay (backoff.Exponential with a jitter of half).
func (b Backoff) Delay(attempt int, r float64) time.Duration {
	return backoff.Exponential{Initial: b.Initial, Max: b.Max, Multiplier: b.Multiplier, Jitter: 0.5}.Delay(attempt, r)
}
