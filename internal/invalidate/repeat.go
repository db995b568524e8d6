package invalidate

import (
	"context"
	"net/url"
	"sync"
	"time"
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
// drop its copy. What it also removes, a response fetched afresh after
// the purge, costs one more miss. A soft purge is repeated as made at its
// first time, so that it marks stale only what was requested before it.
//
// What is left: a write that lands more than RepeatAfter after the purge
// (a message delayed that long), and the repeats still pending when a
// sidecar stops or its L2 changes (Close runs them at once).
const RepeatAfter = 2 * time.Second

// repeatTimeout bounds one repeat (a purge by prefix scans L2).
const repeatTimeout = 30 * time.Second

// repeats holds the purges and invalidations to apply once more.
type repeats struct {
	after time.Duration // RepeatAfter; tests shorten it
	mu    sync.Mutex
	// pending maps each timer to the repeat it will run; closed: Close
	// ran and no repeat is scheduled any more.
	pending map[*time.Timer]func(context.Context)
	closed  bool
	running sync.WaitGroup
}

// schedule runs f (bounded by repeatTimeout) after r.after.
func (r *repeats) schedule(f func(context.Context)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return
	}
	if r.pending == nil {
		r.pending = make(map[*time.Timer]func(context.Context))
	}
	r.running.Add(1)
	var t *time.Timer
	t = time.AfterFunc(r.after, func() {
		defer r.running.Done()
		r.mu.Lock()
		f, ok := r.pending[t]
		delete(r.pending, t)
		r.mu.Unlock()
		if ok {
			run(f)
		}
	})
	r.pending[t] = f
}

func run(f func(context.Context)) {
	ctx, cancel := context.WithTimeout(context.Background(), repeatTimeout)
	defer cancel()
	f(ctx)
}

// close runs the repeats still pending at once and waits for those
// running; none is scheduled after it.
func (r *repeats) close() {
	r.mu.Lock()
	r.closed = true
	pending := r.pending
	r.pending = nil
	r.mu.Unlock()
	for t, f := range pending {
		if t.Stop() {
			run(f)
			r.running.Done()
		}
	}
	r.running.Wait()
}

// Close applies at once the purges and invalidations waiting to be
// repeated (RepeatAfter) and waits for those being repeated. Call it
// before the Remote is closed; nothing is repeated after it.
func (p *Purger) Close() { p.again.close() }

// repeatInvalidate schedules Invalidate's repeat.
func (p *Purger) repeatInvalidate(urls []*url.URL) {
	p.again.schedule(func(ctx context.Context) { p.invalidate(ctx, urls) })
}

// repeatPurge schedules Purge's repeat; a soft purge keeps at.
func (p *Purger) repeatPurge(r Request, at time.Time) {
	p.again.schedule(func(ctx context.Context) {
		if _, err := p.purge(ctx, r, at); err != nil {
			p.log.Warn("repeating a purge: l2 failed", "err", err)
		}
	})
}
