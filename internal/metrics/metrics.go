// Package metrics owns the sidecar's Prometheus collectors, named as
// DESIGN.md fixes them (prefix tiercache_). Nothing registers globally: New
// takes the Registerer to use. Counters on the request path are resolved to
// their label values once, here, so the hit path does no label lookups.
package metrics

import (
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// Result and layer label values of requests_total.
const (
	ResultHit         = "hit"
	ResultMiss        = "miss"
	ResultStale       = "stale"
	ResultRevalidated = "revalidated"
	ResultBypass      = "bypass"
	ResultError       = "error"

	LayerL1     = "l1"
	LayerL2     = "l2"
	LayerOrigin = "origin"
	LayerNone   = "none"
)

// Op label values of body_store_errors_total.
const (
	BodyOpCreate  = "create"
	BodyOpWrite   = "write"
	BodyOpCommit  = "commit"
	BodyOpOpen    = "open"
	BodyOpRecover = "recover"
)

// bodyStoreOps lists the op values of body_store_errors_total.
var bodyStoreOps = []string{BodyOpCreate, BodyOpWrite, BodyOpCommit, BodyOpOpen, BodyOpRecover}

var (
	results = [...]string{ResultHit, ResultMiss, ResultStale, ResultRevalidated, ResultBypass, ResultError}
	layers  = [...]string{LayerL1, LayerL2, LayerOrigin, LayerNone}
)

// resultIndex is the index of r in results, or -1. A switch on the
// constants, cheaper on the request path than hashing the labels.
func resultIndex(r string) int {
	switch r {
	case ResultHit:
		return 0
	case ResultMiss:
		return 1
	case ResultStale:
		return 2
	case ResultRevalidated:
		return 3
	case ResultBypass:
		return 4
	case ResultError:
		return 5
	}
	return -1
}

// layerIndex is the index of l in layers, or -1.
func layerIndex(l string) int {
	switch l {
	case LayerL1:
		return 0
	case LayerL2:
		return 1
	case LayerOrigin:
		return 2
	case LayerNone:
		return 3
	}
	return -1
}

// Metrics holds the sidecar's collectors.
type Metrics struct {
	requests        *prometheus.CounterVec
	requestDuration *prometheus.HistogramVec
	OriginRequests  *prometheus.CounterVec
	OriginDuration  prometheus.Histogram
	Coalesced       prometheus.Counter
	// RefreshesDeferred counts stale-while-revalidate refreshes not
	// started because the most allowed at once were running.
	RefreshesDeferred prometheus.Counter
	L2Errors          *prometheus.CounterVec
	L2Dropped         prometheus.Counter
	L2CircuitOpen     prometheus.Gauge
	Purges            prometheus.Counter
	// RepeatsDropped counts unsafe-method invalidations not repeated
	// because too many repeats were pending (invalidate.RepeatAfter).
	RepeatsDropped prometheus.Counter
	// RelayResubscriptions counts the subscriptions to the control
	// plane's invalidation relay (tiers without L2) made again after one
	// was lost: each clears L1.
	RelayResubscriptions prometheus.Counter
	// InvalidationsRejected counts invalidation messages refused, by
	// reason (invalidate.RejectReasons).
	InvalidationsRejected *prometheus.CounterVec
	ConfigInfo            *prometheus.GaugeVec
	// UpgradedOpen is the number of open upgraded (WebSocket and the
	// like) connections; upgrades counts upgrade requests by result.
	UpgradedOpen prometheus.Gauge
	upgrades     *prometheus.CounterVec
	// passthrough counts connections relayed to the origin as they are,
	// uncached (h2c), by protocol and result.
	passthrough *prometheus.CounterVec
	// purgeRequests counts purge requests (both ports) by outcome.
	purgeRequests *prometheus.CounterVec
	// responses counts the answers to clients by status class;
	// byClass holds its children by status/100 (0: none sent).
	responses *prometheus.CounterVec
	byClass   [6]prometheus.Counter
	// Client connections on the serving port (connguard.MaxConns): open
	// now, idle ones closed to make room, and accepted ones that waited
	// for a slot.
	ClientConns    prometheus.Gauge
	connsReclaimed prometheus.Counter
	connsWaited    prometheus.Counter

	// Ambiguous counts requests that bypassed the cache because origins
	// may read them in more than one way, by what was ambiguous (the
	// Ambiguous constants).
	Ambiguous *prometheus.CounterVec

	// RequestBodies counts request bodies read ahead of the origin request
	// (origin.requestBuffer), by result (the Buffered constants).
	RequestBodies *prometheus.CounterVec

	// The body store (package bodystore): committed bytes and files,
	// files evicted for room, and failed operations by op
	// (the BodyOp constants).
	BodyStoreBytes     prometheus.Gauge
	BodyStoreFiles     prometheus.Gauge
	BodyStoreEvictions prometheus.Counter
	bodyStoreErrors    *prometheus.CounterVec

	// The duration observers of every known result, resolved once
	// (indexed by resultIndex); the request counters of requests no rule
	// saw (rule=""), and those of each rule name ever asked for.
	durByRes [len(results)]prometheus.Observer
	noRule   *Rule
	rulesMu  sync.Mutex
	rules    map[string]*Rule
}

// Rule holds the request counters of one rule name (requests_total's
// rule label): each result and layer's counter is resolved the first time
// it counts, then kept, so that a request costs no label lookup and a
// rule has series only for what happened under it.
type Rule struct {
	vec  *prometheus.CounterVec
	name string
	req  [len(results)][len(layers)]atomic.Pointer[counter]
}

type counter struct{ prometheus.Counter }

// Rule returns the counters of the rule named name (rule names are
// validated and at most 64 a tier, so the label's values are bounded).
// The same name gets the same counters across config versions. Call it
// when a config is compiled, not per request.
func (m *Metrics) Rule(name string) *Rule {
	if m == nil {
		return nil
	}
	m.rulesMu.Lock()
	defer m.rulesMu.Unlock()
	if r, ok := m.rules[name]; ok {
		return r
	}
	r := &Rule{vec: m.requests, name: name}
	m.rules[name] = r
	return r
}

func (r *Rule) inc(i, j int) {
	slot := &r.req[i][j]
	c := slot.Load()
	if c == nil {
		c = &counter{r.vec.WithLabelValues(results[i], layers[j], r.name)}
		slot.Store(c) // a race stores the same child twice: harmless
	}
	c.Inc()
}

// L1Stats is what the L1 gauges read at scrape time. Evictions are split
// by reason: Expired (past L1's life window) and NoSpace (made room for a
// new entry). Capacity is the space L1 may take, in bytes.
type L1Stats struct {
	Entries, Bytes, Expired, NoSpace, Capacity uint64
}

const l1EvictionsHelp = `Entries L1 removed, by reason: "expired" (past L1's life window) or "space" (to make room for a new entry: L1 is too small for what is cached, Varnish's n_lru_nuked).`

// New creates the collectors and registers them with reg. l1 is called at
// scrape time for the L1 gauges (nil: no L1 gauges).
func New(reg prometheus.Registerer, l1 func() L1Stats) (*Metrics, error) {
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tiercache_requests_total",
			Help: "Requests served, by result (hit, miss, stale, revalidated, bypass, error), the layer that answered and the tier rule the request matched (\"default\" for none; \"\" when the request never reached the rules).",
		}, []string{"result", "layer", "rule"}),
		requestDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "tiercache_request_duration_seconds",
			Help:    "Time from request to the end of the response, by result.",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}, []string{"result"}),
		OriginRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tiercache_origin_requests_total",
			Help: "Requests sent to the origin, by status code (or \"error\" when none came back).",
		}, []string{"code"}),
		OriginDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "tiercache_origin_duration_seconds",
			Help:    "Time from sending a request to the origin to its response headers.",
			Buckets: prometheus.DefBuckets,
		}),
		Coalesced: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tiercache_coalesced_requests_total",
			Help: "Requests that waited for another request's origin fetch instead of making their own.",
		}),
		RefreshesDeferred: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tiercache_refreshes_deferred_total",
			Help: "Stale-while-revalidate refreshes not started because the most allowed at once were running (the stale response was served; a later request refreshes).",
		}),
		L2Errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tiercache_l2_errors_total",
			Help: "Failed L2 (Redis) operations, by operation.",
		}, []string{"op"}),
		L2Dropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tiercache_l2_dropped_writes_total",
			Help: "L2 writes dropped because the write queue was full.",
		}),
		L2CircuitOpen: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "tiercache_l2_circuit_open",
			Help: "1 while the L2 circuit breaker is open (L2 skipped).",
		}),
		Purges: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tiercache_purges_total",
			Help: "Purge requests and unsafe-method invalidations applied.",
		}),
		RepeatsDropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tiercache_invalidation_repeats_dropped_total",
			Help: "Unsafe-method invalidations applied but not repeated 2 s later, because too many repeats were pending (a flood of unsafe requests to distinct URLs).",
		}),
		RelayResubscriptions: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tiercache_relay_resubscriptions_total",
			Help: "Subscriptions to the operator's invalidation relay (tiers without L2) made again after one was lost; each cleared L1, since a purge may have been missed.",
		}),
		InvalidationsRejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tiercache_invalidations_rejected_total",
			Help: "Invalidation messages from the tier's channel refused, by reason: malformed, unsigned, bad_mac, expired, future, replay.",
		}, []string{"reason"}),
		ConfigInfo: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tiercache_config_info",
			Help: "1 for the config version (hash) in effect.",
		}, []string{"version"}),
		UpgradedOpen: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "tiercache_upgraded_connections",
			Help: "Connections switched to another protocol (WebSocket and the like) and open now.",
		}),
		upgrades: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tiercache_upgrades_total",
			Help: "Protocol upgrade requests, by result: switched (tunnel opened), refused (the origin or the sidecar declined), error (no answer from the origin, or the tunnel could not start).",
		}, []string{"result"}),
		passthrough: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tiercache_passthrough_connections_total",
			Help: "Client connections on the serving port relayed byte for byte to the origin, uncached, by protocol (h2c: HTTP/2 with prior knowledge, gRPC) and result: relayed (the origin took the connection), refused (--max-upgraded-connections reached, or shutting down), error (the origin could not be reached, or the preface was broken).",
		}, []string{"protocol", "result"}),
		responses: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tiercache_responses_total",
			Help: `Answers to clients on the serving port, by status class: "1xx" to "5xx", whoever made them (the cache, the origin, the sidecar's own errors), and "none" for a client that left before any answer (logged as 499).`,
		}, []string{"class"}),
		purgeRequests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tiercache_purge_requests_total",
			Help: "Purge requests (admin POST /purge, and PURGE on the serving port with purge.httpMethod), by result: purged, failed (applied here, L2 or fan-out failed), unauthorized, limited (rate limit, 429), invalid.",
		}, []string{"result"}),
		ClientConns: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "tiercache_client_connections",
			Help: "Client connections open on the serving port (upgraded ones included), at most --max-connections.",
		}),
		connsReclaimed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tiercache_client_connections_reclaimed_total",
			Help: "Client connections waiting for a request (idle keep-alive ones, and new ones silent for 1s) closed to make room for a new one at --max-connections.",
		}),
		connsWaited: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tiercache_client_connections_waited_total",
			Help: "Client connections that waited for a slot at --max-connections (none waiting for a request to close): each is a sign the bound is too low, or of a flood.",
		}),
		Ambiguous: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tiercache_ambiguous_requests_total",
			Help: "GET and HEAD requests (and POSTs the tier may store) that bypassed the cache because origins may read them in more than one way, by what: path (the readings of the path select different rules: raw, decoded, cleaned).",
		}, []string{"what"}),
		RequestBodies: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tiercache_request_bodies_buffered_total",
			Help: "Request bodies as origin.requestBuffer took them, by result: whole (read before the origin was contacted), too_large (announced or grown past the buffer: forwarded as it arrived, the part read first), over_budget (the sidecar-wide buffer budget was spent: forwarded as it arrived).",
		}, []string{"result"}),
		BodyStoreBytes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "tiercache_body_store_bytes",
			Help: "Bytes of committed bodies in the body store (--body-dir).",
		}),
		BodyStoreFiles: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "tiercache_body_store_files",
			Help: "Committed body files in the body store.",
		}),
		BodyStoreEvictions: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tiercache_body_store_evictions_total",
			Help: "Body files removed, least recently used first, to make room within the body store's budget.",
		}),
		bodyStoreErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tiercache_body_store_errors_total",
			Help: "Failed body store operations, by op: create, write (full disk, I/O error, budget), commit (including a length that does not match Content-Length), open (missing or mismatched file), recover (a file removed at start).",
		}, []string{"op"}),
	}
	cs := []prometheus.Collector{m.requests, m.requestDuration, m.OriginRequests, m.OriginDuration,
		m.Coalesced, m.RefreshesDeferred, m.L2Errors, m.L2Dropped, m.L2CircuitOpen, m.Purges, m.RepeatsDropped, m.RelayResubscriptions, m.InvalidationsRejected, m.ConfigInfo, m.UpgradedOpen, m.upgrades, m.passthrough, m.purgeRequests, m.responses, m.Ambiguous,
		m.ClientConns, m.connsReclaimed, m.connsWaited, m.RequestBodies,
		m.BodyStoreBytes, m.BodyStoreFiles, m.BodyStoreEvictions, m.bodyStoreErrors}
	if l1 != nil {
		cs = append(cs,
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: "tiercache_l1_entries", Help: "Entries in L1.",
			}, func() float64 { return float64(l1().Entries) }),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: "tiercache_l1_bytes", Help: "Bytes of entry data held in L1.",
			}, func() float64 { return float64(l1().Bytes) }),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: "tiercache_l1_capacity_bytes", Help: "Bytes L1 may hold (l1.maxSize rounded up to a whole MiB): l1_bytes over it is how full L1 is.",
			}, func() float64 { return float64(l1().Capacity) }),
			// One series per reason, each a counter read at scrape time:
			// the same name, help and label, as Prometheus requires.
			prometheus.NewCounterFunc(prometheus.CounterOpts{
				Name: "tiercache_l1_evictions_total", Help: l1EvictionsHelp, ConstLabels: prometheus.Labels{"reason": "expired"},
			}, func() float64 { return float64(l1().Expired) }),
			prometheus.NewCounterFunc(prometheus.CounterOpts{
				Name: "tiercache_l1_evictions_total", Help: l1EvictionsHelp, ConstLabels: prometheus.Labels{"reason": "space"},
			}, func() float64 { return float64(l1().NoSpace) }),
		)
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	m.rules = make(map[string]*Rule)
	m.noRule = m.Rule("")
	for i, r := range results {
		m.durByRes[i] = m.requestDuration.WithLabelValues(r)
		// The requests no rule saw have all their series from the start:
		// requests_total is there (at 0) before the first request, and
		// tools that look for it (kubectl tiercache status) find it.
		for j := range layers {
			m.noRule.req[i][j].Store(&counter{m.requests.WithLabelValues(r, layers[j], "")})
		}
	}
	for _, r := range []string{"switched", "refused", "error"} {
		m.upgrades.WithLabelValues(r)
	}
	for _, r := range []string{"relayed", "refused", "error"} {
		m.passthrough.WithLabelValues("h2c", r)
	}
	for i, class := range statusClasses {
		m.byClass[i] = m.responses.WithLabelValues(class)
	}
	for _, op := range bodyStoreOps {
		m.bodyStoreErrors.WithLabelValues(op)
	}
	for _, op := range []string{"get", "set", "delete", "publish", "subscribe", "lease"} {
		m.L2Errors.WithLabelValues(op)
	}
	return m, nil
}

// Request counts one served request that no rule saw and its duration
// in seconds.
func (m *Metrics) Request(result, layer string, seconds float64) {
	if m == nil {
		return
	}
	m.RuleRequest(m.noRule, result, layer, seconds)
}

// RuleRequest counts one served request under rule (from Rule) and its
// duration in seconds.
func (m *Metrics) RuleRequest(rule *Rule, result, layer string, seconds float64) {
	if m == nil {
		return
	}
	i, j := resultIndex(result), layerIndex(layer)
	if i < 0 || j < 0 {
		m.requests.WithLabelValues(result, layer, rule.name).Inc()
		if i < 0 {
			return
		}
	} else {
		rule.inc(i, j)
	}
	m.durByRes[i].Observe(seconds)
}

// statusClasses are the class label's values, by status/100.
var statusClasses = [6]string{"none", "1xx", "2xx", "3xx", "4xx", "5xx"}

// Response counts one answer to a client by its status (0 or the 499 of
// a client that left before anything was sent: "none").
func (m *Metrics) Response(status int) {
	if m == nil {
		return
	}
	i := status / 100
	if status == 499 || i < 1 || i > 5 {
		i = 0
	}
	m.byClass[i].Inc()
}

// SetConfig records the config version in effect (and drops the old one).
func (m *Metrics) SetConfig(version string) {
	if m == nil {
		return
	}
	m.ConfigInfo.Reset()
	m.ConfigInfo.WithLabelValues(version).Set(1)
}

// Upgrade counts one protocol upgrade request by result (switched,
// refused, error).
func (m *Metrics) Upgrade(result string) {
	if m == nil {
		return
	}
	m.upgrades.WithLabelValues(result).Inc()
}

// Passthrough counts one connection relayed to the origin as it is, by
// protocol (h2c) and result (relayed, refused, error).
func (m *Metrics) Passthrough(protocol, result string) {
	if m == nil {
		return
	}
	m.passthrough.WithLabelValues(protocol, result).Inc()
}

// PurgeRequest counts one purge request (admin POST /purge or serving-port
// PURGE) by its result.
func (m *Metrics) PurgeRequest(result string) {
	if m == nil {
		return
	}
	m.purgeRequests.WithLabelValues(result).Inc()
}

// ConnOpened, ConnClosed, ConnReclaimed and ConnWaited make Metrics a
// connguard.ConnMeter: a client connection took a slot, gave it back, was
// closed idle to make room, waited for a slot.
func (m *Metrics) ConnOpened() {
	if m != nil {
		m.ClientConns.Inc()
	}
}

func (m *Metrics) ConnClosed() {
	if m != nil {
		m.ClientConns.Dec()
	}
}

func (m *Metrics) ConnReclaimed() {
	if m != nil {
		m.connsReclaimed.Inc()
	}
}

func (m *Metrics) ConnWaited() {
	if m != nil {
		m.connsWaited.Inc()
	}
}

// BodyStoreError counts one failed body store operation (the BodyOp constants).
func (m *Metrics) BodyStoreError(op string) {
	if m == nil {
		return
	}
	m.bodyStoreErrors.WithLabelValues(op).Inc()
}

// BodyStoreUsage sets the body store gauges: committed bytes and files.
func (m *Metrics) BodyStoreUsage(bytes int64, files int) {
	if m == nil {
		return
	}
	m.BodyStoreBytes.Set(float64(bytes))
	m.BodyStoreFiles.Set(float64(files))
}

// BodyStoreEvicted counts n body files evicted for room.
func (m *Metrics) BodyStoreEvicted(n int) {
	if m == nil || n == 0 {
		return
	}
	m.BodyStoreEvictions.Add(float64(n))
}

// The results of request buffering (tiercache_request_bodies_buffered_total).
const (
	BufferedWhole      = "whole"
	BufferedTooLarge   = "too_large"
	BufferedOverBudget = "over_budget"
)

// RequestBodyBuffered counts a request body as request buffering took it
// (the Buffered constants).
func (m *Metrics) RequestBodyBuffered(result string) {
	m.RequestBodies.WithLabelValues(result).Inc()
}

// What made a request ambiguous (tiercache_ambiguous_requests_total).
const (
	AmbiguousPath = "path"
)

// AmbiguousRequest counts a request that bypassed the cache because
// origins may read it in more than one way (the Ambiguous constants).
func (m *Metrics) AmbiguousRequest(what string) {
	m.Ambiguous.WithLabelValues(what).Inc()
}
