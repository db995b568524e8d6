package sidecar

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"reflect"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tiercache/tiercache/internal/accesslog"
	"github.com/tiercache/tiercache/internal/bodystore"
	"github.com/tiercache/tiercache/internal/controlplane"
	"github.com/tiercache/tiercache/internal/invalidate"
	"github.com/tiercache/tiercache/internal/metrics"
	"github.com/tiercache/tiercache/internal/proxy"
	"github.com/tiercache/tiercache/internal/store"
	"github.com/tiercache/tiercache/internal/store/l1"
	"github.com/tiercache/tiercache/internal/store/l2"
	"github.com/tiercache/tiercache/internal/tierconfig"
)

// A generation is one build of the data plane: the L1 cache, the L2
// client, the layered store over them, the purger, the invalidation
// subscription and the proxy. Rules, defaults, origin, coalescing and purge
// settings are not part of it: they are read per request from the shared
// tierconfig.Holder, so changing them swaps the holder only. A config that
// changes the L1 parameters or the L2 connection builds a new generation
// (reusing the L1 cache or the L2 client when their parameters did not
// change), swaps it in for new requests, and retires the old one in the
// background once its requests have ended.
type generation struct {
	// number counts the generations built, from 1 (the "generation" of
	// log lines). It is not the invalidation sequence ("seq" in
	// internal/invalidate and L2), nor a purge counter.
	number uint64
	l1cfg  tierconfig.L1 // what cache was built with
	l2cfg  tierconfig.L2 // what client was built with (no addresses: none)
	// cfg is the whole config the generation runs (the admin /config,
	// redacted).
	cfg tierconfig.Config

	cache  *l1.Cache
	client *l2.Client // nil: L1 only
	// relayed: without L2, invalidations go through the control plane's
	// relay (dataPlane.relay).
	relayed bool
	// ownsL1 and ownsL2 say whether closing this generation closes cache
	// and client: false once they were handed on to the next generation.
	ownsL1, ownsL2 bool

	store  *store.Layered
	purger *invalidate.Purger
	px     *proxy.Proxy
	purge  http.Handler // admin POST /purge over purger
	// purgeMethod serves PURGE on the serving port (purge.httpMethod)
	// over purger, with purge's rate limit and counter.
	purgeMethod http.Handler

	cancel context.CancelFunc // ends the subscription and the preload
	bg     sync.WaitGroup     // the subscription and the preload
	// subscribed is closed once the generation's invalidation
	// subscription is first in place (nil without L2 or the relay).
	subscribed chan struct{}

	// active counts the requests (serving and purge) using this
	// generation; retired is set once it is no longer current. idle is
	// closed when both hold (see acquire).
	active   atomic.Int64
	retired  atomic.Bool
	idle     chan struct{}
	idleOnce sync.Once
}

func (g *generation) release() {
	if g.active.Add(-1) == 0 && g.retired.Load() {
		g.idleOnce.Do(func() { close(g.idle) })
	}
}

// retire marks g as no longer current; idle closes once its last request
// has ended.
func (g *generation) retire() {
	g.retired.Store(true)
	if g.active.Load() == 0 {
		g.idleOnce.Do(func() { close(g.idle) })
	}
}

// dataPlane owns the generations of a running sidecar and everything they
// share: the config holder, the metrics, the origin transport, the
// sidecar's identity in invalidation messages.
type dataPlane struct {
	ctx      context.Context // the run's: L1 and L2 live as long as it
	o        Options
	getenv   func(string) string
	upstream *url.URL
	log      *slog.Logger
	m        *metrics.Metrics
	holder   *tierconfig.Holder
	rt       http.RoundTripper
	id       string
	// soft owns the Go soft memory limit with --memory-limit auto (nil
	// otherwise).
	soft *softLimit

	// alog is the access log, shared by every generation.
	alog *accesslog.Logger

	// up tunnels upgraded connections (WebSocket) for every generation:
	// they use no cache, so a rebuild leaves them open; RunWith closes
	// them after the drain.
	up *proxy.Upgrades
	// h2c relays connections that open with the HTTP/2 preface to the
	// origin (passthrough.go); nil with an https upstream, where HTTP/2
	// is answered 505.
	h2c *passthrough

	cur   atomic.Pointer[generation]
	built uint64 // generations built (Apply's goroutine only)
	// watches are the fills in progress of every generation: an old
	// generation's fill may still store into an L1 or L2 that the new
	// generation's purger purges (they may share them), so every purger
	// marks the fills of every generation.
	watches *invalidate.Watches
	// purgeLimit is the rate limit of admin purges, shared by every
	// generation's purge handler (nil: none).
	purgeLimit *invalidate.Limiter
	// expiredBefore and noSpaceBefore are the evictions of L1 caches no
	// longer in use, so that tiercache_l1_evictions_total does not go
	// down when L1 is rebuilt.
	expiredBefore, noSpaceBefore atomic.Int64
	// version is the tier config version in effect (config_info).
	version atomic.Pointer[string]
	// keys sign and verify the tier's invalidation messages (every
	// generation's purger shares them).
	keys *invalidate.Keyring
	// bodies is the body store (--body-dir; nil: none), shared by every
	// generation: its files outlive an L1 rebuild, whose orphans its own
	// eviction reclaims.
	bodies *bodystore.Store
	// relay carries the invalidations of generations without L2 to the
	// tier's other sidecars (nil without a control plane: they stay
	// local to this pod).
	relay *controlplane.RelayClient

	// applyMu serialises config changes: control-plane pushes and secret
	// rotations. base is the config in effect as its source gave it,
	// before the command line and the secrets; sec are the secrets in
	// effect.
	applyMu sync.Mutex
	base    tierconfig.Config
	sec     secrets

	retiring   sync.WaitGroup
	stopRetire chan struct{} // closed at shutdown: retirements stop waiting
	// retired is closed once the last generation retired so far is
	// closed: generations close in the order they retire, since one may
	// own the L2 client that an earlier one, still retiring, shares (and
	// whose purger's repeats still go to L2). Apply's goroutine only.
	retired   chan struct{}
	closeOnce sync.Once
	closeErr  error
}

// l1Stats feeds the L1 gauges from the current generation.
func (dp *dataPlane) l1Stats() metrics.L1Stats {
	g := dp.cur.Load()
	if g == nil {
		return metrics.L1Stats{}
	}
	s := g.cache.Stats()
	return metrics.L1Stats{
		Entries:  uint64(s.Entries),
		Bytes:    uint64(s.Bytes),
		Expired:  uint64(dp.expiredBefore.Load() + s.Expired),
		NoSpace:  uint64(dp.noSpaceBefore.Load() + s.NoSpace),
		Capacity: uint64(s.Capacity),
	}
}

// acquire returns the current generation, counted as in use until
// release. A generation retired between the load and the count is given
// back and the load retried: retire sets retired after the swap, so the
// retry finds its successor. (Seq-cst atomics: either retire sees the
// count, or acquire sees retired.)
func (dp *dataPlane) acquire() *generation {
	for {
		g := dp.cur.Load()
		g.active.Add(1)
		if !g.retired.Load() {
			return g
		}
		g.release()
	}
}

// ServeHTTP serves a request with the current generation; the generation
// is not closed before the request has ended. With purge.httpMethod on, a
// PURGE is a purge, never forwarded (the origin does not see its token);
// off, it goes to the origin like any method the cache does not serve.
// A connection that opened with the HTTP/2 preface is relayed to the
// origin (passthrough.go), upgrades are tunnelled: neither uses a
// generation.
func (dp *dataPlane) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if dp.h2c != nil && isPreface(r) {
		dp.h2c.ServeHTTP(w, r)
		return
	}
	if cfg := dp.holder.Load(); r.Method == invalidate.MethodPurge && cfg.Config.Purge.HTTPMethod {
		g := dp.acquire()
		defer g.release()
		start := time.Now()
		aw := &answerWriter{ResponseWriter: w}
		g.purgeMethod.ServeHTTP(aw, r)
		if dp.alog != nil {
			end := time.Now()
			dp.alog.Log(r, cfg, &accesslog.Entry{End: end, Duration: end.Sub(start),
				Status: aw.statusOr200(), Bytes: aw.n, Result: resultPurge, Layer: metrics.LayerNone})
		}
		return
	}
	if proxy.IsUpgrade(r) {
		dp.up.ServeHTTP(w, r)
		return
	}
	g := dp.acquire()
	defer g.release()
	g.px.ServeHTTP(w, r)
}

// purgeHandler is the admin POST /purge of the current generation.
func (dp *dataPlane) purgeHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g := dp.acquire()
		defer g.release()
		g.purge.ServeHTTP(w, r)
	})
}

// build builds a generation for c. It reuses prev's L1 cache when the L1
// parameters are the same, and prev's L2 client when the L2 connection is
// the same; commit hands them over. warm, when not nil, is set once the
// L1 preload from L2 has ended (readiness, for the first generation). On
// error nothing of prev is touched and what was built is closed.
func (dp *dataPlane) build(c *tierconfig.Compiled, prev *generation, warm *atomic.Bool) (_ *generation, err error) {
	cfg := c.Config
	dp.built++
	g := &generation{number: dp.built, l1cfg: cfg.L1, l2cfg: cfg.L2, cfg: cfg, ownsL1: true, ownsL2: true, idle: make(chan struct{})}
	var newL1, newL2 bool
	defer func() {
		if err == nil {
			return
		}
		if g.store != nil {
			_ = g.store.Close()
		}
		if newL2 {
			_ = g.client.Close()
		}
		if newL1 {
			_ = g.cache.Close()
		}
	}()

	if prev != nil && prev.l1cfg == cfg.L1 {
		g.cache = prev.cache
	} else {
		g.cache, err = l1.New(dp.ctx, cfg.L1.CacheConfig())
		if err != nil {
			return nil, err
		}
		newL1 = true
	}
	if len(cfg.L2.Addresses) > 0 {
		if prev != nil && prev.client != nil && sameL2(prev.l2cfg, cfg.L2) {
			g.client = prev.client
		} else {
			if g.client, err = openL2(cfg.L2, dp.o, dp.log); err != nil {
				return nil, err
			}
			newL2 = true
		}
	}

	gctx, cancel := context.WithCancel(dp.ctx)
	g.cancel = cancel
	defer func() {
		if err != nil {
			cancel()
		}
	}()
	g.store, err = store.New(gctx, store.Options{
		L1: g.cache, L2: g.client, Timeout: cfg.L2.Timeout.Std(), Metrics: dp.m, Logger: dp.log,
	})
	if err != nil {
		return nil, err
	}
	g.purger = invalidate.NewPurger(store.NewLocal(g.cache, dp.bodyRemover()), dp.holder)
	g.purger.OnPurge = dp.m.Purges.Inc
	g.purger.OnRepeatDropped = dp.m.RepeatsDropped.Inc
	g.purger.UseWatches(dp.watches)
	popts := proxy.Options{
		Upstream:    dp.upstream,
		Config:      dp.holder,
		Store:       g.store,
		Invalidator: g.purger,
		Metrics:     dp.m,
		Logger:      dp.log,
		Transport:   dp.rt,
		Upgrades:    dp.up,
		Bodies:      dp.bodies,
		AccessLog:   dp.alog,
	}
	if g.client != nil {
		g.purger.SetAuth(invalidate.Auth{
			Keys:     dp.keys,
			Channel:  g.client.Channel(),
			Rejected: func(reason string) { dp.m.InvalidationsRejected.WithLabelValues(reason).Inc() },
		})
		// Each generation publishes as its own sender, so that the next
		// one applies what this one publishes (the repeat of a purge made
		// before a config change gave the next a new L1, say) as another
		// sidecar's message.
		g.purger.SetRemote(remote{g.client, g.store, dp.m.L2Errors.WithLabelValues("publish")}, dp.id+"/g"+strconv.FormatUint(g.number, 10), cfg.L2.Timeout.Std(), dp.log)
		popts.Cluster = g.store
	} else if dp.relay != nil {
		g.relayed = true
		g.purger.SetAuth(invalidate.Auth{
			Keys:     dp.keys,
			Channel:  relayChannel(dp.o),
			Rejected: func(reason string) { dp.m.InvalidationsRejected.WithLabelValues(reason).Inc() },
		})
		g.purger.SetRelay(relayRemote{dp.relay}, dp.id+"/g"+strconv.FormatUint(g.number, 10), dp.log)
	}
	if g.px, err = proxy.New(popts); err != nil {
		return nil, err
	}
	purgeOpts := invalidate.HandlerOptions{Limit: dp.purgeLimit, Count: dp.m.PurgeRequest}
	g.purge = invalidate.Handler(g.purger, dp.holder, purgeOpts)
	g.purgeMethod = invalidate.MethodHandler(g.purger, dp.holder, purgeOpts)

	// Nothing can fail from here on.
	if g.client != nil {
		if warm == nil {
			warm = new(atomic.Bool)
		}
		g.subscribed = make(chan struct{})
		subscribeAndPreload(gctx, &g.bg, g.client, g.store, g.purger, cfg.L2.WarmStart, warm, g.subscribed,
			dp.m.L2Errors.WithLabelValues("subscribe"), dp.log)
	} else {
		if g.relayed {
			g.subscribed = make(chan struct{})
			subscribeRelay(gctx, &g.bg, dp.relay, g.purger, g.subscribed, dp.m.RelayResubscriptions, dp.log)
		}
		if warm != nil {
			warm.Store(true)
		}
	}
	return g, nil
}

// sameL2 reports whether a and b connect to L2 the same way, so that a new
// generation may keep the L2 client. Every field counts but those
// l2Connection clears; a field added to tierconfig.L2 counts until it is
// listed there (TestSameL2SeesEveryField makes a new field choose).
func sameL2(a, b tierconfig.L2) bool {
	if len(a.Addresses) == 0 && len(b.Addresses) == 0 {
		return true
	}
	return reflect.DeepEqual(l2Connection(a), l2Connection(b))
}

// l2Connection is l without the fields that do not shape the client: the
// key prefix (only a check; the prefix is the sidecar's own identity's),
// warm start (read when a generation starts) and the L2 body limit (read
// per fill from the config in effect).
func l2Connection(l tierconfig.L2) tierconfig.L2 {
	l.KeyPrefix = ""
	l.WarmStart = tierconfig.WarmStart{}
	l.MaxBodySize = 0
	return l
}

// subscribeHandover bounds how long a retired generation keeps its
// invalidation subscription while its successor, on a new L2 client,
// subscribes.
const subscribeHandover = 10 * time.Second

// swap makes next the current generation and retires prev in the
// background: once prev's requests have ended (bounded by
// --shutdown-timeout), and, when both subscribe to invalidations (L2's
// channel or the control plane's relay), once next has subscribed
// to invalidations (bounded by subscribeHandover: on a new L2 client, a
// message published in between would otherwise reach neither, a password
// rotation included; on the same one, the repeats prev's purger applies
// as it closes would not reach next's L1), its proxy, subscription and store are closed, and
// its L1 cache and L2 client unless next took them over, after the
// generations retired before it are closed. Only Apply's goroutine calls
// swap.
func (dp *dataPlane) swap(prev, next *generation) {
	// Between relayed generations only when prev was subscribed: a relay
	// the control plane does not serve (an operator of an earlier
	// version) has nothing to hand over.
	handover := prev.client != nil && next.client != nil || prev.relayed && next.relayed && closed(prev.subscribed)
	if next.cache == prev.cache {
		prev.ownsL1 = false
	} else {
		st := prev.cache.Stats()
		dp.expiredBefore.Add(st.Expired)
		dp.noSpaceBefore.Add(st.NoSpace)
	}
	if prev.client != nil && next.client == prev.client {
		prev.ownsL2 = false
	}
	dp.cur.Store(next)
	prev.retire()
	dp.retiring.Add(1)
	before, done := dp.retired, make(chan struct{})
	dp.retired = done
	go func() {
		defer dp.retiring.Done()
		defer close(done)
		t := time.NewTimer(dp.o.ShutdownTimeout)
		defer t.Stop()
		select {
		case <-prev.idle:
		case <-dp.stopRetire:
		case <-t.C:
			dp.log.Warn("config change: requests of the previous data plane still running; closing it under them",
				"generation", prev.number, "requests", prev.active.Load(), "waited", dp.o.ShutdownTimeout.String())
		}
		if handover {
			h := time.NewTimer(subscribeHandover)
			defer h.Stop()
			select {
			case <-next.subscribed:
			case <-dp.stopRetire:
			case <-h.C:
				dp.log.Warn("config change: the new data plane has not subscribed to invalidations yet; closing the previous one anyway",
					"generation", prev.number, "waited", subscribeHandover.String())
			}
		}
		if before != nil {
			<-before // bounded: its own waits are
		}
		if err := dp.closeGeneration(prev); err != nil {
			dp.log.Warn("config change: closing the previous data plane", "generation", prev.number, "err", err)
		} else {
			dp.log.Debug("config change: previous data plane closed", "generation", prev.number)
		}
	}()
}

// closed reports whether ch is closed.
func closed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// closeGeneration stops g's background refreshes (bounded), its
// subscription and preload, flushes its store, and closes what it owns.
func (dp *dataPlane) closeGeneration(g *generation) error {
	// Background refreshes get their own short bound: draining may have
	// used up the shutdown timeout.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(dp.ctx), 2*time.Second)
	defer cancel()
	err := g.px.Close(ctx)
	g.cancel()
	g.bg.Wait()
	// g's purger is idle now: no request, refresh or subscription uses it.
	// The purges it was to repeat are applied now, while L2 is open.
	g.purger.Close()
	_ = g.store.Close()
	if g.ownsL2 && g.client != nil {
		if cerr := g.client.Close(); cerr != nil {
			err = fmt.Errorf("l2: %w", cerr)
		}
	}
	if g.ownsL1 {
		_ = g.cache.Close()
	}
	return err
}

// close ends the data plane at shutdown, after the control-plane client
// and the serving server have stopped: retirements stop waiting, then the
// current generation is closed.
func (dp *dataPlane) close() error {
	dp.closeOnce.Do(func() {
		close(dp.stopRetire)
		dp.retiring.Wait()
		if g := dp.cur.Load(); g != nil {
			dp.closeErr = dp.closeGeneration(g)
		}
	})
	return dp.closeErr
}

// resultPurge is the access log's result of a PURGE on the serving port
// (not a requests_total label: purges have their own counter).
const resultPurge = "purge"

// answerWriter records the status and body bytes of a PURGE's answer for
// the access log. Only purge answers (small JSON bodies) pass through it:
// the cache's responses are never wrapped, so their sendfile path stays.
type answerWriter struct {
	http.ResponseWriter
	status int
	n      int64
}

func (a *answerWriter) WriteHeader(code int) {
	if a.status == 0 {
		a.status = code
	}
	a.ResponseWriter.WriteHeader(code)
}

func (a *answerWriter) Write(p []byte) (int, error) {
	n, err := a.ResponseWriter.Write(p)
	a.n += int64(n)
	return n, err
}

// statusOr200 is the status written, or 200 when the handler wrote a
// body without one (as net/http then sends).
func (a *answerWriter) statusOr200() int {
	if a.status == 0 {
		return http.StatusOK
	}
	return a.status
}
