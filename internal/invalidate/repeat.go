package invalidate

import (
	"context"
	"net/url"
	"strings"
	"sync"
	"time"

	"k8s.io/utils/clock"

	"github.com/tiercache/tiercache/internal/entry"
)

// RepeatAfter is how long after a cluster-wide purge or invalidation this
// sidecar applies it once more, to L2, its own L1 and, through the
// channel, every other sidecar's L1.
//
// Why: every sidecar marks its fills in progress when a message reaches
// it, and drops its queued L2 writes, so that a fill that began before
// the purge is never stored after it. One window is left across
// replicas: a replica whose fill wrote its response to L2 after this
// sidecar deleted the key there, but before the message reached that
// replica, put the purged response back into L2, where it stayed until
// its TTL, copied into the L1 of every replica that missed it meanwhile.
// The window is the message's delay, normally a millisecond or two, but
// it opens on every purge of a key that some replica is filling at that
// moment (a hot key with a short TTL). Redis offers no fence that would
// close it in cluster mode (the entry and any tombstone live in different
// slots), so the purge is repeated, as CDN operators purge twice: the
// repeat removes what such a write put back, and tells every replica to
// drop its copy.
//
// The repeat takes only what was requested before the purge, as a
// Varnish ban only takes objects older than itself: entries whose
// RequestTime is before the purge's time plus repeatMargin (Vary markers
// and hit-for-miss records, which record no request, always), each
// deleted from L2 only if it is still the value read. A response fetched
// afresh after the purge stays, in L2, in every L1 and in the body
// store, so a purge costs a hot key one miss, not two, and a purge of
// everything does not empty the tier a second time. The repeat marks no
// fill and drops no queued L2 write: every fill that began before the
// purge was marked by the purge itself, where it ran and where its
// message arrived (or, where it was missed, at the resubscription that
// found it missed: Subscribed), and every write queued before it dropped. A soft
// purge is repeated as made at its first time (and the margin), so that
// it marks stale only what was requested before it.
//
// What is left: a write that lands more than RepeatAfter after the purge
// (a message delayed that long), a response from a fill that began
// before the purge on a sidecar whose clock runs more than repeatMargin
// ahead of the purging one's, and the repeats still pending when a
// sidecar stops or its L2 changes (Close runs them at once).
const RepeatAfter = 2 * time.Second

// repeatTimeout bounds one repeat (a purge by prefix scans L2).
const repeatTimeout = 30 * time.Second

// maxRepeats and maxRepeatBytes bound the invalidation repeats pending
// at once, by count and by the bytes of their URLs. Any client can send
// unsafe requests, each to a new URL (a query string will do) and as
// long as the server takes: without a bound the sidecar would hold
// RepeatAfter's worth of them, whatever their rate and size. Past the
// bound an invalidation is applied at once as always, only not repeated
// (Purger.OnRepeatDropped counts it): the repeat is a second chance
// against a narrow race, and a sidecar under such a flood is better off
// without it than out of memory. 10,000 is 5,000 unsafe requests a
// second to distinct URLs. Purges are not bounded here: they need the
// purge token and are rate-limited.
const (
	maxRepeats     = 10000
	maxRepeatBytes = 4 << 20
)

// repeats holds the purges and invalidations to apply once more.
type repeats struct {
	after time.Duration // RepeatAfter; tests shorten it
	// budget is closeTimeout; tests shorten it.
	budget time.Duration
	mu     sync.Mutex
	// pending maps each timer to the repeat it will run; keyed maps a
	// repeat's key to its timer; bytes are the keyed repeats' keys'
	// bytes; closed: Close ran and no repeat is scheduled any more.
	pending map[clock.Timer]repeat
	keyed   map[string]clock.Timer
	bytes   int
	closed  bool
	running sync.WaitGroup
	// base is the context of every repeat; stop ends it, when Close's
	// bound is spent.
	base context.Context
	stop context.CancelFunc
}

type repeat struct {
	f    func(context.Context)
	size int // len of its key
}

// schedule runs f (bounded by repeatTimeout) after r.after on c. A repeat
// with the same key (not "") still waiting is dropped for this one: the
// unsafe requests to a URL written many times a second cost one repeat,
// made after the last of them (each of which applied itself at once).
// A keyed repeat past maxRepeats or maxRepeatBytes is not scheduled:
// schedule reports false.
func (r *repeats) schedule(c clock.WithDelayedExecution, key string, f func(context.Context)) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return true
	}
	if r.pending == nil {
		r.pending = make(map[clock.Timer]repeat)
		r.keyed = make(map[string]clock.Timer)
		r.base, r.stop = context.WithCancel(context.Background())
	}
	if t, ok := r.keyed[key]; ok && key != "" {
		if rp, waiting := r.pending[t]; waiting && t.Stop() {
			delete(r.pending, t)
			r.bytes -= rp.size
			r.running.Done()
		}
		delete(r.keyed, key)
	}
	if key != "" && (len(r.pending) >= maxRepeats || r.bytes+len(key) > maxRepeatBytes) {
		return false
	}
	r.running.Add(1)
	var t clock.Timer
	t = c.AfterFunc(r.after, func() {
		defer r.running.Done()
		r.mu.Lock()
		rp, ok := r.pending[t]
		delete(r.pending, t)
		r.bytes -= rp.size
		if r.keyed[key] == t {
			delete(r.keyed, key)
		}
		base := r.base
		r.mu.Unlock()
		if ok {
			ctx, cancel := context.WithTimeout(base, repeatTimeout)
			defer cancel()
			rp.f(ctx)
		}
	})
	r.pending[t] = repeat{f: f, size: len(key)}
	if key != "" {
		r.keyed[key] = t
		r.bytes += len(key)
	}
	return true
}

// closeTimeout bounds Close's repeats as a whole, those it runs and
// those already running: a sidecar stopping while L2 is down must not
// wait a timeout per pending repeat, nor a running one's repeatTimeout.
const closeTimeout = 5 * time.Second

// close runs the repeats still pending at once and waits for those
// running; none is scheduled after it. A timer that fired meanwhile
// finds its repeat gone from pending: it is run here. Once closeTimeout
// is spent, the running repeats are cancelled and the pending ones left
// are not run: close returns how many.
func (r *repeats) close() (skipped int) {
	r.mu.Lock()
	r.closed = true
	pending, stop := r.pending, r.stop
	r.pending, r.keyed, r.bytes = nil, nil, 0
	base := r.base
	r.mu.Unlock()
	if stop == nil {
		return 0 // nothing was ever scheduled
	}
	ctx, cancel := context.WithTimeout(base, r.budget)
	defer cancel()
	context.AfterFunc(ctx, stop)
	for t, rp := range pending {
		stopped := t.Stop()
		if ctx.Err() == nil {
			rp.f(ctx)
		} else {
			skipped++
		}
		if stopped {
			r.running.Done()
		}
	}
	r.running.Wait()
	return skipped
}

// Close applies at once the purges and invalidations waiting to be
// repeated (RepeatAfter) and waits for those being repeated. Call it
// before the Remote is closed; nothing is repeated after it.
func (p *Purger) Close() {
	if n := p.again.close(); n > 0 {
		p.log.Warn("stopping: purges and invalidations not repeated, the time allowed was spent", "repeats", n, "allowed", closeTimeout.String())
	}
}

// repeatInvalidate schedules Invalidate's repeat, limited to what was
// requested before before.
func (p *Purger) repeatInvalidate(urls []*url.URL, before time.Time) {
	var key strings.Builder
	for _, u := range urls {
		key.WriteString(u.String())
		key.WriteByte(' ')
	}
	if !p.again.schedule(p.clock, key.String(), func(ctx context.Context) { p.invalidate(ctx, urls, before) }) && p.OnRepeatDropped != nil {
		p.OnRepeatDropped()
	}
}

// repeatPurge schedules Purge's repeat, limited to what was requested
// before before (a soft purge's repeat marks as of before).
func (p *Purger) repeatPurge(r Request, before time.Time) {
	p.again.schedule(p.clock, "", func(ctx context.Context) {
		if _, err := p.purge(ctx, r, before, before); err != nil {
			p.log.Warn("repeating a purge: l2 failed", "err", err)
		}
	})
}

// repeatMargin is added to a purge's time to make its repeat's limit:
// the entries compared with it carry the clock of the sidecar that
// fetched them (entry.Entry.RequestTime), which may run ahead of this
// one's. A response fetched within it after the purge is removed by the
// repeat too (one more miss); one from a fill that began before the
// purge on a sidecar whose clock runs more than this ahead survives it.
const repeatMargin = time.Second

// older reports whether e was requested before before: what a repeat
// removes. An entry that records no request (a Vary marker, which also
// retires every variant under it, or a hit-for-miss record) always is.
func older(e *entry.Entry, before time.Time) bool { return e.RequestTime.Before(before) }
