package proxy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/singleflight"

	"github.com/tiercache/tiercache/internal/accesslog"
	"github.com/tiercache/tiercache/internal/bodystore"
	"github.com/tiercache/tiercache/internal/entry"
	"github.com/tiercache/tiercache/internal/httpcache"
	"github.com/tiercache/tiercache/internal/invalidate"
	"github.com/tiercache/tiercache/internal/metrics"
	"github.com/tiercache/tiercache/internal/originconn"
	"github.com/tiercache/tiercache/internal/tierconfig"
)

// Store keeps entries by key. Get decodes into e (reusing its slices) and
// reports which layer answered ("l1", "l2"); any error is a miss. Keys
// passed to Get may alias a reused buffer: a Store must not retain them.
// DropLocal forgets key in this replica's own layer only, and only while
// the entry there refers to body file id (store.Layered.DropLocal): a body
// file gone from this replica's disk never deletes the shared entry.
type Store interface {
	Get(ctx context.Context, key string, e *entry.Entry) (string, error)
	Set(ctx context.Context, key string, e *entry.Entry) error
	Delete(ctx context.Context, key string) error
	DropLocal(key string, id [16]byte)
}

// Invalidator removes entries when an unsafe request changes a resource
// (RFC 9111 §4.4), and watches fills, so that a fill of a resource that a
// purge or invalidation overtakes is served but not stored after it.
type Invalidator interface {
	// Invalidate removes every stored variant of each absolute URL.
	Invalidate(ctx context.Context, urls []*url.URL)
	// Watch registers a fill of host and target (path?query as keyed)
	// before it asks the origin; the fill stores through the watch's
	// Commit and ends it when done.
	Watch(host, target string) *invalidate.Watch
}

// Cluster coalesces misses across the replicas of a tier (through Redis).
type Cluster interface {
	// TryLead takes the tier-wide lease for key for ttl, renewed while
	// held. lead is false when another replica holds it; release (which
	// the caller must call) gives it back.
	TryLead(ctx context.Context, key string, ttl time.Duration) (release func(), lead bool)
	// SetShared stores e where the other replicas see it at once.
	SetShared(ctx context.Context, key string, e *entry.Entry) error
	// GetNewer looks key up in the shared tier only (past a stale L1
	// copy), once, and returns a response received after after.
	GetNewer(ctx context.Context, key string, e *entry.Entry, after time.Time) (string, error)
}

// Options configure a Proxy. Upstream, Config and Store are required.
type Options struct {
	// Upstream is the origin's base URL (scheme and host; a path is not
	// supported).
	Upstream *url.URL
	// Config is the tier config in effect; it may be swapped while serving.
	Config *tierconfig.Holder
	// Store holds entries.
	Store Store
	// Invalidator handles unsafe-method invalidation.
	Invalidator Invalidator
	// Cluster, when set, coalesces misses across replicas for tiers whose
	// coalescing is cluster-wide. When it also implements SharedBodies,
	// body files up to the tier's l2.maxBodySize are shared through it.
	Cluster Cluster
	// Metrics; default: collectors on a private registry.
	Metrics *metrics.Metrics
	// Logger; default: slog.Default().
	Logger *slog.Logger
	// Transport to the origin; default: a keep-alive transport that never
	// compresses or decompresses on its own.
	Transport http.RoundTripper
	// Now is the clock; default time.Now.
	Now func() time.Time
	// Bodies, when set, keeps bodies larger than the tier's
	// bodyStore.threshold in files, served with sendfile (bodies.go); nil
	// keeps every stored body inline, and bodies above the L1 entry limit
	// pass through uncached. The Proxy uses it but does not own it.
	Bodies *bodystore.Store
	// AccessLog, when set, gets one line per request the Proxy answers
	// (upgraded connections and refused requests aside); the Proxy uses
	// it but does not own it.
	AccessLog *accesslog.Logger
	// Upgrades tunnels protocol-switching requests (WebSocket); default:
	// one of the Proxy's own, closed by Close, to which ServeHTTP hands
	// them. A caller that passes its own (a sidecar shares one across
	// data-plane rebuilds) hands upgrade requests (IsUpgrade) to it before
	// calling ServeHTTP, and closes it itself; the hit path then does not
	// look for them twice.
	Upgrades *Upgrades
}

// Proxy is the caching reverse proxy. It is safe for concurrent use.
type Proxy struct {
	upstream *url.URL
	cfg      *tierconfig.Holder
	store    Store
	bodies   *bodystore.Store // nil: bodies stay inline
	shb      SharedBodies     // nil: body files stay local (l2bodies.go)
	copies   singleflight.Group
	inval    Invalidator
	cluster  Cluster
	m        *metrics.Metrics
	log      *slog.Logger
	rt       http.RoundTripper
	now      func() time.Time
	up       *Upgrades
	ownsUp   bool
	alog     *accesslog.Logger

	// ruleTab holds the request counters of the rules of the config in
	// effect (ruleMetrics).
	ruleTab atomic.Pointer[ruleTable]

	flights flightGroup
	// refreshes bounds the background refreshes in flight.
	refreshes slots
	// copySlots bounds the copies of bodies from L2 running at once
	// (l2bodies.go): each holds chunks in memory.
	copySlots chan struct{}
	// reqBudget bounds the request-body bytes read ahead (reqbuffer.go),
	// respBudget the response bytes queued ahead of clients (relay.go).
	reqBudget, respBudget *byteBudget
	keys                  sync.Pool // *keyBuf
	bufs                  sync.Pool // *[]byte copy buffers
	codecs                codecs    // content-coding decoders and the gzip writer (coding.go)
	// parts serializes the read-combine-store of partial responses
	// (partial.go), so that two parts stored at once never lose one
	// another's bytes or remove a piece file the other keeps.
	parts sync.Mutex
	// building holds, guarded by parts, the keys whose complete response
	// a goroutine is building from pieces (completePieces): at most one
	// build per key at a time. true when a part was stored under the key
	// since the build read its entry (the build is then tried again).
	building map[string]bool
	// beforeBuild, when set, runs as a goroutine starts building the
	// complete response of a partial one from its pieces
	// (completePieces): a test seam (nil in production) that lets a test
	// hold a build or purge before it.
	beforeBuild func(key string)

	// Background refreshes, L2 body writes and file fills (fillfile.go)
	// are owned by the Proxy: they stop when ctx is cancelled by Close
	// and Close waits for them.
	ctx    context.Context
	cancel context.CancelFunc
	bg     sync.WaitGroup
}

// New checks o and returns a Proxy.
func New(o Options) (*Proxy, error) {
	if o.Upstream == nil || (o.Upstream.Scheme != "http" && o.Upstream.Scheme != "https") || o.Upstream.Host == "" {
		return nil, errors.New("proxy: upstream must be an absolute http or https URL")
	}
	if o.Upstream.Path != "" && o.Upstream.Path != "/" {
		return nil, fmt.Errorf("proxy: upstream %q: a path prefix is not supported", o.Upstream)
	}
	if o.Config == nil || o.Config.Load() == nil {
		return nil, errors.New("proxy: a config is required")
	}
	if o.Store == nil {
		return nil, errors.New("proxy: a store is required")
	}
	if o.Invalidator == nil {
		return nil, errors.New("proxy: an invalidator is required")
	}
	p := &Proxy{
		upstream:   o.Upstream,
		cfg:        o.Config,
		store:      o.Store,
		bodies:     o.Bodies,
		inval:      o.Invalidator,
		cluster:    o.Cluster,
		m:          o.Metrics,
		log:        o.Logger,
		rt:         o.Transport,
		now:        o.Now,
		alog:       o.AccessLog,
		reqBudget:  newByteBudget(RequestBufferBudget),
		respBudget: newByteBudget(ResponseBufferBudget),
	}
	if p.m == nil {
		m, err := metrics.New(prometheus.NewRegistry(), nil)
		if err != nil {
			return nil, err
		}
		p.m = m
	}
	if p.log == nil {
		p.log = slog.Default()
	}
	if p.rt == nil {
		p.rt = NewTransport()
	}
	if p.now == nil {
		p.now = time.Now
	}
	p.up = o.Upgrades
	if p.up == nil {
		p.up, p.ownsUp = NewUpgrades(p.upstream, p.cfg, p.rt, p.m, p.log, 0, 0), true
	}
	if sb, ok := o.Cluster.(SharedBodies); ok && p.bodies != nil {
		p.shb = sb
	}
	p.copySlots = make(chan struct{}, maxBodyCopies)
	p.building = make(map[string]bool)
	p.refreshes.max = maxRefreshes
	p.keys.New = func() any { return new(keyBuf) }
	p.bufs.New = func() any { b := make([]byte, 32<<10); return &b }
	p.ctx, p.cancel = context.WithCancel(context.Background())
	return p, nil
}

// NewTransport returns the origin transport the proxy uses by default:
// keep-alive connections sized for a sidecar, no transparent compression
// (the proxy must see and store exactly what the origin sends), bounded
// response headers, and connections that are never reused once the origin
// sent bytes past the end of a response (internal/originconn: they would
// be read as the next request's response).
func NewTransport() *http.Transport {
	d := &originconn.Dialer{Dialer: &net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}}
	return &http.Transport{
		DialContext:            d.DialContext,
		DialTLSContext:         d.DialTLSContext,
		MaxIdleConns:           1024,
		MaxIdleConnsPerHost:    1024,
		IdleConnTimeout:        90 * time.Second,
		ExpectContinueTimeout:  time.Second,
		DisableCompression:     true,
		MaxResponseHeaderBytes: 1 << 20,
	}
}

// Close stops background refreshes and file fills, waits for them (and
// L2 body writes) to end, bounded by ctx, and closes idle origin
// connections.
func (p *Proxy) Close(ctx context.Context) error {
	p.cancel()
	if p.ownsUp {
		if err := p.up.Close(ctx); err != nil {
			return err
		}
	}
	done := make(chan struct{})
	go func() { p.bg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		select {
		case <-done: // both ready: finished is what counts
		default:
			return fmt.Errorf("proxy: background work (refreshes, fills, L2 writes) still running: %w", ctx.Err())
		}
	}
	if t, ok := p.rt.(interface{ CloseIdleConnections() }); ok {
		t.CloseIdleConnections()
	}
	return nil
}

// ServeHTTP implements http.Handler.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if why := unsupported(r); why != "" {
		sn := p.refuse(w, r, why)
		p.m.Response(sn.status)
		if p.alog != nil {
			out := outcome{result: metrics.ResultError, layer: metrics.LayerNone, sent: sn}
			p.logAccess(r, p.cfg.Load(), &out, time.Now(), 0)
		}
		return
	}
	// Upgrades are not in the access log: a tunnel is no request-response
	// exchange, and it may last for hours (operations.md, Access log).
	if p.ownsUp && IsUpgrade(r) {
		p.up.ServeHTTP(w, r)
		return
	}
	// The duration is measured on the real clock (p.now is the caching
	// rules' clock, which tests move): time.Since reads only the
	// monotonic clock.
	start := time.Now()
	cfg := p.cfg.Load()
	// The rule's conditions, the key and the Vary values must come from
	// what the origin receives: the fields the client names in Connection
	// are dropped before anything reads the header (else "Connection:
	// Accept-Language" fills the fr variant with the origin's answer for
	// no language). Without a Connection field naming one (keep-alive and
	// close name none) there is nothing to do here: the fixed hop-by-hop
	// fields never reach the origin in any request, so its answer cannot
	// depend on them; they go in outbound.
	if httpcache.NamesFields(r.Header["Connection"]) {
		httpcache.RemoveHopByHop(r.Header)
	}
	// The rule is the one every reading of the path selects (raw,
	// decoded, cleaned: originview); when they disagree, some origin
	// serves the request from a resource other than the rule's, and the
	// request is neither served from nor stored into the cache.
	//
	// An absolute-form target without a path ("GET http://host") reaches
	// the origin as "/" (URL.RequestURI), so it is matched and keyed as
	// "/". An opaque one ("GET http:x") reaches it as "x", which no rule
	// describes and which has no path to key: it bypasses the cache.
	if r.URL.Path == "" && r.URL.Opaque == "" && r.Method != http.MethodConnect {
		r.URL.Path = "/"
	}
	rule, agreed := cfg.MatchRequest(r.Host, r.URL.EscapedPath(), r.Header)
	agreed = agreed && r.URL.Opaque == ""
	var dbg *debugInfo
	if _, ok := r.Header[debugHeader]; ok {
		dbg = debugRequest(r, cfg)
	}
	var out outcome
	switch {
	case !agreed:
		out = p.serveAmbiguous(w, r, cfg, rule, dbg)
	case r.Method == http.MethodGet || r.Method == http.MethodHead:
		out = p.serveCacheable(w, r, cfg, rule, dbg)
	default:
		out = p.serveUnsafe(w, r, cfg, rule, dbg)
	}
	end := time.Now()
	elapsed := end.Sub(start)
	out.rule = rule.Name
	p.m.RuleRequest(p.ruleMetrics(cfg, rule), out.result, out.layer, elapsed.Seconds())
	p.m.Response(out.sent.status)
	if p.alog != nil {
		p.logAccess(r, cfg, &out, end, elapsed)
	}
	if out.abort {
		panic(http.ErrAbortHandler)
	}
}

// outcome is what happened to one request: the handler fills it once per
// request, and metrics, Cache-Status and the access log read it.
type outcome struct {
	// result and layer are the metrics' labels (metrics.Result*,
	// metrics.Layer*).
	result, layer string
	// abort: the origin broke off mid-body; the client must see a broken
	// response rather than a complete-looking short one.
	abort bool
	// fwd says why the request went to the origin (RFC 9211 §2.2);
	// fwdNone for a response served from the cache without asking.
	fwd fwdKind
	// stored: the origin's response was (to be) stored.
	stored bool
	// rule is the name of the rule the request matched (the default
	// rule's name when none did).
	rule string
	// ttl is the remaining freshness of the response served from the
	// cache (negative when stale); hasTTL says it is set.
	ttl    time.Duration
	hasTTL bool
	// originTime is how long the origin took to send its response
	// header, 0 when it was not asked.
	originTime time.Duration
	// sent is the status and body bytes written to the client, where the
	// path that wrote them reports it (hits, stale answers, passes,
	// misses streamed from the origin); zero elsewhere.
	sent sent
	// notStored is why the origin's response was not stored (a short
	// token such as "no-store"; see notStoredReason), "" when it was
	// stored or not asked.
	notStored string
}

// logAccess hands the request's outcome to the access log. The entry
// lives on the stack: the log copies what it keeps.
func (p *Proxy) logAccess(r *http.Request, cfg *tierconfig.Compiled, out *outcome, end time.Time, elapsed time.Duration) {
	bytes := out.sent.bytes
	if r.Method == http.MethodHead {
		bytes = 0 // net/http took whatever was written and sent none of it
	}
	e := accesslog.Entry{
		End: end, Duration: elapsed,
		Status: out.sent.status, Bytes: bytes,
		Result: out.result, Layer: out.layer, Rule: out.rule,
		OriginTime: out.originTime,
	}
	p.alog.Log(r, cfg, &e)
}

// sent is what a response put on the wire, for the access log: its status
// and the body bytes written (known from what was handed to the
// ResponseWriter, which is not wrapped: that would hide the connection's
// ReadFrom, sendfile).
type sent struct {
	status int
	bytes  int64
}

// clientGone is logged for a request whose client left before anything
// was written: nginx's 499.
const statusClientGone = 499

// with returns o with abort and what went out set.
func (o outcome) with(abort bool, sn sent) outcome {
	o.abort, o.sent = abort, sn
	return o
}

// as returns o with the result, layer, abort and what went out of other
// (what a part of the request path that knows less decided in the end).
func (o outcome) as(other outcome) outcome {
	o.result, o.layer, o.abort, o.sent = other.result, other.layer, other.abort, other.sent
	return o
}

// fwdKind is the fwd parameter of Cache-Status (RFC 9211 §2.2).
type fwdKind uint8

const (
	fwdNone     fwdKind = iota // served from the cache
	fwdBypass                  // a rule or the request's shape bypasses the cache
	fwdMethod                  // the method is not cacheable
	fwdURIMiss                 // nothing stored for the URI
	fwdVaryMiss                // stored variants, none for this request
	fwdMiss                    // only a hit-for-miss marker stored, or a body file that cannot be opened for now
	fwdRequest                 // the request's directives forbade a stored response
	fwdStale                   // the stored response was stale
	fwdPartial                 // part of the response was stored, the rest asked for
)

// String is the parameter's token value.
func (k fwdKind) String() string {
	switch k {
	case fwdBypass:
		return "bypass"
	case fwdMethod:
		return "method"
	case fwdURIMiss:
		return "uri-miss"
	case fwdVaryMiss:
		return "vary-miss"
	case fwdMiss:
		return "miss"
	case fwdRequest:
		return "request"
	case fwdStale:
		return "stale"
	case fwdPartial:
		return "partial"
	}
	return ""
}

// maxRefreshes bounds the stale-while-revalidate refreshes one proxy runs
// at once. A refresh serves nobody waiting: the stale response already
// went out. Unbounded, every stale key starts one, and under a herd they
// fill the origin's queue ahead of cold misses, whose clients do wait
// (measured with loadgen herd: p99 1.1 s, origin queue 1,600 deep). With
// the bound, a refresh that finds no slot is not started (the stale
// entry keeps being served and the next request for it tries again), so
// foreground misses see at most this many refreshes ahead of them.
const maxRefreshes = 16

// slots is a counting semaphore that never blocks.
type slots struct {
	n   atomic.Int64
	max int64
}

func (s *slots) tryAcquire() bool {
	if s.n.Add(1) > s.max {
		s.n.Add(-1)
		return false
	}
	return true
}

func (s *slots) release() { s.n.Add(-1) }
