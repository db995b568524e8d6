package invalidate

import (
	"fmt"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Limiter bounds the rate of purges a sidecar accepts: a token bucket of
// Burst purges refilled at Rate per second. A purge of everything takes
// the whole bucket, so that a token that leaked cannot keep a tier's cache
// empty: after one, the next purge of any kind waits Burst/Rate seconds.
// One Limiter is shared by every purge handler of the sidecar.
type Limiter struct {
	mu    sync.Mutex
	lim   *rate.Limiter
	burst int
}

// NewLimiter returns a limiter of perSecond purges with bursts of burst;
// perSecond <= 0 means no limit (nil).
func NewLimiter(perSecond float64, burst int) *Limiter {
	if perSecond <= 0 {
		return nil
	}
	burst = max(burst, 1)
	return &Limiter{lim: rate.NewLimiter(rate.Limit(perSecond), burst), burst: burst}
}

// take spends the cost of one purge (all of the bucket for a purge of
// everything) and returns 0, or spends nothing and returns how long until
// the purge would be allowed.
func (l *Limiter) take(all bool) time.Duration {
	if l == nil {
		return 0
	}
	n := 1
	if all {
		n = l.burst
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	r := l.lim.ReserveN(now, n)
	if !r.OK() {
		return time.Duration(float64(n) / float64(l.lim.Limit()) * float64(time.Second))
	}
	if d := r.DelayFrom(now); d > 0 {
		r.CancelAt(now)
		return d
	}
	return 0
}

func (l *Limiter) String() string {
	return fmt.Sprintf("%g purges/s, bursts of %d; a purge of everything takes the whole burst", float64(l.lim.Limit()), l.burst)
}
