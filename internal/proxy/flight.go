package proxy

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/tiercache/tiercache/internal/backoff"
	"github.com/tiercache/tiercache/internal/coalesce"
	"github.com/tiercache/tiercache/internal/entry"
	"github.com/tiercache/tiercache/internal/httpcache"
	"github.com/tiercache/tiercache/internal/metrics"
)

// flightGroup collapses the origin fetches of one key (internal/coalesce):
// a flight leaves a shared for its waiters, or shows them a live body
// file to stream while it is written.
type flightGroup = coalesce.Group[shared, *live]

// lead is the leader's hold on a flight: the one way it ends.
//
// A flight's owner (coalesce for a miss, refresh for a background
// revalidation) joins it as leader and holds its lead. Whoever learns
// first what the waiters get publishes it through the lead, and that ends
// the flight: the owner when its re-check finds a fresh stored response
// (or another replica's), or the fill it runs, as soon as it knows: the
// stored response (before its own client has the last byte, so that what
// that client asks next finds it), a stale one standing in for a failed
// origin, or nothing (uncacheable, too large, too slow: waiters fetch for
// themselves without waiting for the leader's body). A fill writing a
// body file first streams it to the waiters (Stream) and publishes at
// its end. When the owner returns, End publishes nothing if nobody
// published, unless the fill detached (a body-file fill going on on a
// goroutine of its own, which then publishes). Only the first publish
// counts: a fill's store-time bound fires on a timer, racing the fill's
// own publish.
//
// A nil *lead is a fill on its own: nobody waits, publishing does
// nothing.
type lead = coalesce.Lead[shared, *live]

// flight is one origin fetch that other requests for its key wait on.
type flight = coalesce.Flight[shared, *live]

// live is a response being written to a body file while waiters stream
// it.
type live struct {
	e    *entry.Entry // status, header and times; no body
	size int64        // Content-Length, or -1 when unknown
	// follow opens a reader of the body from its first byte: Read blocks
	// until more is written, returns io.EOF once the body is complete and
	// an error when the fill gave it up.
	follow func() io.ReadCloser
	// The leader's request values of the response's Vary fields, as in
	// shared.
	vary    []string
	varyKey []byte
}

// shared is what a flight leaves for its waiters. A nil e means waiters
// must fetch for themselves (uncacheable, too large, failed).
type shared struct {
	e   *entry.Entry
	v   verdict // what waiters report
	out outcome // how waiters count
	// The leader's request values of the response's Vary fields: a waiter
	// whose values differ cannot use e.
	vary    []string
	varyKey []byte
	// overtaken: the fill was overtaken by an invalidation of its
	// resource and not stored; waiters join a new flight (once) rather
	// than each fetching alone, so that one write cannot turn a collapsed
	// fetch into one origin request per waiter.
	overtaken bool
}

// coalesce makes concurrent misses for one key share one origin fetch.
func (p *Proxy) coalesce(w http.ResponseWriter, r *http.Request, c *call) outcome {
	f, l := p.flights.Join(c.key)
	if l == nil {
		return p.wait(w, r, c, f)
	}
	defer l.End()

	// Re-check inside the flight: another flight for this key may have
	// stored a response between our lookup and our joining.
	kb := p.keys.Get().(*keyBuf)
	defer p.keys.Put(kb)
	if out, ok := p.serveFresh(w, r, c, l, kb); ok {
		return out
	}
	if p.tierWide(c) {
		if !p.takeLease(r.Context(), c) {
			if out, served := p.awaitReplica(w, r, c, l, kb); served {
				return out
			}
		}
		if c.release != nil {
			defer c.releaseLease()
			// The previous holder may have stored its fill and released
			// the lease between our last look and our taking it.
			if out, ok := p.serveFresh(w, r, c, l, kb); ok {
				return out
			}
			c.shared = true
		}
		// Otherwise the other replica's fill did not arrive in time:
		// fetch without the lease.
	}
	return p.fill(w, r, c, l)
}

// serveFresh looks the request up again and, when a fresh response is
// stored now, serves it and hands it to the flight's waiters. A replica
// whose L1 holds a stale copy also asks the shared tier past it, for a
// newer response another replica stored.
func (p *Proxy) serveFresh(w http.ResponseWriter, r *http.Request, c *call, l *lead, kb *keyBuf) (outcome, bool) {
	kb.build(r, c.rule)
	got := p.lookup(r.Context(), kb, r)
	if got.ok && c.stale != nil && p.cluster != nil && !got.e.ResponseTime.After(c.stale.ResponseTime) {
		if layer, err := p.cluster.GetNewer(r.Context(), c.key, &kb.resp, c.stale.ResponseTime); err == nil {
			got.e, got.layer = &kb.resp, layer
		}
	}
	if !got.ok {
		return outcome{}, false
	}
	use, age := httpcache.Evaluate(stored(got.e), c.rcc, p.now())
	if use != httpcache.UseFresh {
		return outcome{}, false
	}
	body, st := p.openBody(r, kb.Key(), got.e)
	if st == bodyMissing {
		return outcome{}, false
	}
	v := hitVerdict(pick(got.layer, xHitL1, xHitL2), c.rule, nil)
	out := outcome{result: metrics.ResultHit, layer: got.layer, abort: false}
	if st == bodyBusy {
		// The entry is fine; its file cannot be opened for now. The
		// waiters try it for themselves (wait), and pass while it
		// cannot be: nobody fills over it.
		l.Publish(shared{e: detach(got.e), v: v, out: out})
		return p.passBusy(w, r, c.cfg, c.rule, c.dbg), true
	}
	if body != nil {
		defer body.Close()
	}
	l.Publish(shared{e: detach(got.e), v: v, out: out})
	v.dbg = c.dbg
	out.sent = p.serveEntry(w, r, got.e, age, v, body)
	return out, true
}

const (
	// A replica waiting for another's fill looks first after replicaPoll,
	// then backs off by half each time up to maxReplicaPoll, so that many
	// waiting keys on a busy node do not flood Redis with polls.
	replicaPoll    = 10 * time.Millisecond
	maxReplicaPoll = 200 * time.Millisecond
	// leaseTTL is the life of a fetch lease without renewal: its holder
	// renews it while it fetches, so this bounds how long the others wait
	// for a holder that died or lost Redis, not how long a fetch may take.
	leaseTTL = 2 * time.Second
)

// tierWide reports whether c's fetch is coalesced across the tier's
// replicas (a shared L2 and coalescing.clusterWide): one replica holds the
// key's lease (takeLease) and fetches, the others wait for its result in
// L2.
func (p *Proxy) tierWide(c *call) bool {
	return p.cluster != nil && c.cfg.Config.CoalesceClusterWide()
}

// takeLease tries to take the tier-wide fetch lease of c's key, for
// leaseTTL or the coalescing timeout if that is shorter, and reports
// whether it did: then c holds it (c.release) until c.releaseLease.
func (p *Proxy) takeLease(ctx context.Context, c *call) bool {
	release, lead := p.cluster.TryLead(ctx, c.key, min(leaseTTL, c.cfg.Config.Coalescing.Timeout.Std()))
	if lead {
		c.release = release
	}
	return lead
}

// awaitReplica waits, up to the coalescing timeout, for the replica that
// holds the key's lease to store its fill, and serves it. It looks
// through the normal lookup (L1, then L2), so a Vary marker written by the
// other replica is followed to this request's variant. Local waiters share
// the result. Each poll also tries the lease: once the other replica has
// given it up without storing anything (an uncacheable answer, an error)
// or lost it (it died), this one takes over the fetch (served false, the
// lease in c) instead of waiting out the timeout.
func (p *Proxy) awaitReplica(w http.ResponseWriter, r *http.Request, c *call, l *lead, kb *keyBuf) (out outcome, served bool) {
	p.poll(c.cfg.Config.Coalescing.Timeout.Std(), func() bool {
		if out, served = p.serveFresh(w, r, c, l, kb); served {
			return true
		}
		return p.takeLease(r.Context(), c)
	})
	return out, served
}

// poll calls try after replicaPoll, then at intervals growing by half up
// to maxReplicaPoll, until try reports done, wait has passed or the Proxy
// closes.
func (p *Proxy) poll(wait time.Duration, try func() (done bool)) {
	polls := backoff.Exponential{Initial: replicaPoll, Max: maxReplicaPoll, Multiplier: 1.5}
	ctx, cancel := context.WithTimeout(p.ctx, wait)
	defer cancel()
	for attempt := 0; backoff.Sleep(ctx, polls.Delay(attempt, 0)); attempt++ {
		if try() {
			return
		}
	}
}

// wait waits for the leader's fetch and serves its response, or fetches
// for itself when the response cannot be shared or the wait times out. A
// waiter that gives up never affects the leader's fetch.
func (p *Proxy) wait(w http.ResponseWriter, r *http.Request, c *call, f *flight) outcome {
	p.m.Coalesced.Inc()
	switch f.Wait(r.Context(), c.cfg.Config.Coalescing.Timeout.Std()) {
	case coalesce.Streaming:
		return p.follow(w, r, c, f.Stream())
	case coalesce.TimedOut:
		return p.fill(w, r, c, nil)
	case coalesce.Canceled:
		return outcome{result: metrics.ResultError, layer: metrics.LayerNone, abort: false, sent: sent{status: statusClientGone}}
	}
	res := f.Result()
	if res.overtaken && !c.rejoined {
		c.rejoined = true
		return p.coalesce(w, r, c)
	}
	if res.e == nil || !sameVariant(res.vary, res.varyKey, r, c.rule.Policy.Vary) {
		return p.fill(w, r, c, nil)
	}
	body, st := p.openBody(r, c.key, res.e)
	switch st {
	case bodyMissing:
		// Its body file went between the fill and now.
		return p.fill(w, r, c, nil)
	case bodyBusy:
		return p.passBusy(w, r, c.cfg, c.rule, c.dbg)
	}
	if body != nil {
		defer body.Close()
	}
	out := res.out // the leader's; what went out is this waiter's own
	v := res.v
	v.dbg = c.dbg // the waiter's own, never the leader's
	out.sent = p.serveEntry(w, r, res.e, httpcache.CurrentAge(stored(res.e), p.now()), v, body)
	return out
}

// follow serves a waiter from the response its leader is writing to a
// body file, as it grows. Should the fill give up midway, the waiter's
// response is broken off (abort): it never looks complete when it is not.
func (p *Proxy) follow(w http.ResponseWriter, r *http.Request, c *call, l *live) outcome {
	if !sameVariant(l.vary, l.varyKey, r, c.rule.Policy.Vary) {
		return p.fill(w, r, c, nil)
	}
	if l.e.Flags&entry.FlagCoded != 0 {
		if cd, name := storedCoding(l.e); !httpcache.Acceptable(r.Header, cd, name) {
			// The growing file is in a coding this client does not take,
			// and not yet checked to decode: it fills for itself (and is
			// served from what it stores, coded.go).
			return p.fill(w, r, c, nil)
		}
	}
	h := w.Header()
	writeEntryHeader(h, l.e, httpcache.AgeHeader(httpcache.CurrentAge(stored(l.e), p.now())))
	stripTargeted(h, c.cfg.StripTargeted)
	v := verdict{x: xMissCoalesced, rule: c.rule, dbg: c.dbg, fwd: c.why, stored: true, collapsed: true}
	if cs, ok := cacheStatus(c.cfg, v, l.e.Status, 0, false); ok {
		h["Cache-Status"] = append(h["Cache-Status"], cs)
	}
	h["X-Cache"] = v.x
	out := outcome{result: metrics.ResultMiss, layer: metrics.LayerOrigin, abort: false}
	if httpcache.NotModified(r.Header, l.e.Status, l.e) {
		notModified(w)
		out.sent = sent{status: http.StatusNotModified}
		return out
	}
	if l.size >= 0 && bodyAllowed(l.e.Status) {
		h["Content-Length"] = []string{strconv.FormatInt(l.size, 10)}
	}
	w.WriteHeader(l.e.Status)
	out.sent = sent{status: l.e.Status}
	if !bodyAllowed(l.e.Status) {
		return out
	}
	body := l.follow()
	defer body.Close()
	var err error
	if l.size >= 0 {
		// The follower hands each grown piece of the file to w's ReadFrom:
		// sendfile. An error is the fill's or the client's; either way the
		// response is broken off.
		out.sent.bytes, err = io.Copy(w, body)
	} else {
		// Chunked: read and flush piece by piece, so that nothing waits
		// in net/http's buffers while the fill does.
		out.sent.bytes, err = p.streamN(w, body)
	}
	if err != nil {
		out.abort = true
	}
	return out
}

// sameVariant reports whether r selects the same variant as the leader's
// request did (vary: the response's Vary names, varyKey: the leader's
// values for them, normalized as o says).
func sameVariant(vary []string, varyKey []byte, r *http.Request, o httpcache.VaryOptions) bool {
	if len(vary) == 0 {
		return true
	}
	var buf [256]byte
	return bytes.Equal(httpcache.AppendVaryKey(buf[:0], vary, r.Header, o), varyKey)
}

// discard is the client of a background refresh: nobody.
type discard struct{ h http.Header }

func (d *discard) Header() http.Header {
	if d.h == nil {
		d.h = make(http.Header)
	}
	return d.h
}
func (d *discard) Write(b []byte) (int, error) { return len(b), nil }
func (d *discard) WriteHeader(int)             {}

// refresh revalidates c's stale entry in the background, once per key:
// when a fetch for the key is already running, it does nothing. The
// caller has taken a refresh slot (p.refreshes), which refresh gives back.
func (p *Proxy) refresh(r *http.Request, c *call) {
	_, l := p.flights.Join(c.key)
	if l == nil {
		p.refreshes.release()
		return
	}
	// The request ends when the handler returns; the refresh keeps its own
	// copy, bound to the Proxy's lifetime.
	br := r.Clone(p.ctx)
	br.Method, br.Body, br.ContentLength = http.MethodGet, http.NoBody, 0
	c.background = true
	p.bg.Add(1)
	go func() {
		defer p.bg.Done()
		var freeOnce sync.Once
		free := func() { freeOnce.Do(p.refreshes.release) }
		defer free()
		defer l.End()
		if p.tierWide(c) {
			// One refresh per key across the tier: a replica that does not
			// get the lease takes the refreshing replica's result from L2.
			if !p.takeLease(p.ctx, c) {
				// Waiting for another replica's refresh asks nothing of the
				// origin: it takes no refresh slot.
				free()
				p.awaitRefresh(c, l, min(c.cfg.Config.Coalescing.Timeout.Std(), 2*leaseTTL))
				return
			}
			defer c.releaseLease()
			c.shared = true
		}
		p.fill(&discard{}, br, c, l)
	}()
}

// awaitRefresh waits, up to wait and with the same backing-off polls as a
// waiting fill, for the replica that refreshes c's key to store a newer
// fresh response in L2, which it promotes into L1 and hands to the
// flight's waiters. Meanwhile this replica keeps serving its stale copy.
func (p *Proxy) awaitRefresh(c *call, l *lead, wait time.Duration) {
	p.poll(wait, func() bool {
		var e entry.Entry
		layer, err := p.cluster.GetNewer(p.ctx, c.key, &e, c.stale.ResponseTime)
		if err != nil {
			return false
		}
		// Newer is not fresh: L2 keeps responses past their freshness (for
		// stale windows, revalidation and an unreachable origin), and the
		// waiters are served what is handed to them as a hit.
		if use, _ := httpcache.Evaluate(stored(&e), httpcache.RequestCC{}, p.now()); use != httpcache.UseFresh {
			return false
		}
		l.Publish(shared{e: detach(&e), v: hitVerdict(pick(layer, xHitL1, xHitL2), c.rule, nil), out: outcome{result: metrics.ResultHit, layer: layer, abort: false}})
		return true
	})
}
