package invalidate

import (
	"context"
	"net/url"
	"strings"
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
	// pending maps each timer to the repeat it will run; keyed maps a
	// repeat's key to its timer; closed: Close ran and no repeat is
	// scheduled any more.
	pending map[*time.Timer]func(context.Context)
	keyed   map[string]*time.Timer
	closed  bool
	running sync.WaitGroup
}

// schedule runs f (bounded by repeatTimeout) after r.after. A repeat
// with the same key (not "") still waiting is dropped for this one: the
// unsafe requests to a URL written many times a second cost one repeat,
// made after the last of them (each of which applied itself at once).
func (r *repeats) schedule(key string, f func(context.Context)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return
	}
	if r.pending == nil {
		r.pending = make(map[*time.Timer]func(context.Context))
		r.keyed = make(map[string]*time.Timer)
	}
	if t, ok := r.keyed[key]; ok && key != "" {
		if _, waiting := r.pending[t]; waiting && t.Stop() {
			delete(r.pending, t)
			r.running.Done()
		}
		delete(r.keyed, key)
	}
	r.running.Add(1)
	var t *time.Timer
	t = time.AfterFunc(r.after, func() {
		defer r.running.Done()
		r.mu.Lock()
		f, ok := r.pending[t]
		delete(r.pending, t)
		if r.keyed[key] == t {
			delete(r.keyed, key)
		}
		r.mu.Unlock()
		if ok {
			run(f)
		}
	})
	r.pending[t] = f
	if key != "" {
		r.keyed[key] = t
	}
}

func run(f func(context.Context)) {
	ctx, cancel := context.WithTimeout(context.Background(), repeatTimeout)
	defer cancel()
	f(ctx)
}

// closeTimeout bounds Close's repeats as a whole: a sidecar stopping
// while L2 is down must not wait a timeout per pending repeat.
const closeTimeout = 5 * time.Second

// close runs the repeats still pending at once and waits for those
// running; none is scheduled after it. A timer that fired meanwhile
// finds its repeat gone from pending: it is run here.
func (r *repeats) close() {
	r.mu.Lock()
	r.closed = true
	pending := r.pending
	r.pending, r.keyed = nil, nil
	r.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	for t, f := range pending {
		stopped := t.Stop()
		f(ctx)
		if stopped {
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
	var key strings.Builder
	for _, u := range urls {
		key.WriteString(u.String())
		key.WriteByte(' ')
	}
	p.again.schedule(key.String(), func(ctx context.Context) { p.invalidate(ctx, urls) })
}

// repeatPurge schedules Purge's repeat; a soft purge keeps at.
func (p *Purger) repeatPurge(r Request, at time.Time) {
	p.again.schedule("", func(ctx context.Context) {
		if _, err := p.purge(ctx, r, at); err != nil {
			p.log.Warn("repeating a purge: l2 failed", "err", err)
		}
	})
}
