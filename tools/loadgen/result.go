package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// maxXCacheValues bounds the distinct X-Cache values kept per worker, so a
// misbehaving server cannot grow the maps without limit.
const maxXCacheValues = 32

// NoXCache stands for a response without an X-Cache header.
const NoXCache = "(none)"

// workerStats is what one worker saw; it is merged into a Result at the end.
type workerStats struct {
	hist       Histogram
	requests   int64 // completed: a response or a transport error
	responses  int64
	errors     int64
	fromCache  int64
	errKinds   map[string]int64
	errSamples map[string]string
	status     map[int]int64
	xcache     map[string]int64
	xdetail    map[string]int64
	slowFrom   time.Duration    // Config.Slow
	slow       map[string]int64 // answers >= slowFrom by X-Cache detail
	// bases breaks the answers down by base URL (runs over bases only);
	// timeline[i] by base ("" without bases) within interval i.
	bases    map[string]*Tally
	timeline []map[string]*Tally
}

func newWorkerStats(slowFrom time.Duration) *workerStats {
	return &workerStats{
		slowFrom:   slowFrom,
		slow:       map[string]int64{},
		errKinds:   map[string]int64{},
		errSamples: map[string]string{},
		status:     map[int]int64{},
		xcache:     map[string]int64{},
		xdetail:    map[string]int64{},
		bases:      map[string]*Tally{},
	}
}

func (ws *workerStats) transportError(err error) {
	ws.requests++
	ws.errors++
	kind := classify(err)
	ws.errKinds[kind]++
	if _, ok := ws.errSamples[kind]; !ok {
		ws.errSamples[kind] = err.Error()
	}
}

// response records an answer and returns its X-Cache value
// (NormalizeXCache) and whether it counts as an error.
func (ws *workerStats) response(resp *http.Response, missing bool, latency time.Duration) (xcache string, isErr bool) {
	ws.requests++
	ws.responses++
	ws.hist.RecordDuration(latency)
	ws.status[resp.StatusCode]++
	ok := resp.StatusCode >= 200 && resp.StatusCode < 400 ||
		missing && resp.StatusCode == http.StatusNotFound
	if !ok {
		ws.errors++
		ws.errKinds["status_"+strconv.Itoa(resp.StatusCode)]++
	}
	raw := resp.Header.Get("X-Cache")
	xc := XCacheToken(raw)
	if _, seen := ws.xcache[xc]; !seen && len(ws.xcache) >= maxXCacheValues {
		xc = "(other)"
	}
	ws.xcache[xc]++
	if ServedFromCache(raw) {
		ws.fromCache++
	}
	detail := NormalizeXCache(raw)
	if _, seen := ws.xdetail[detail]; !seen && len(ws.xdetail) >= maxXCacheValues {
		detail = "(other)"
	}
	ws.xdetail[detail]++
	if latency >= ws.slowFrom {
		ws.slow[detail]++
	}
	return detail, !ok
}

// slice adds an answer to the per-base and per-interval tallies.
func (ws *workerStats) slice(base string, a answer, start time.Time, interval time.Duration, byBase bool) {
	if byBase {
		tallyOf(ws.bases, base).add(a)
	}
	if interval <= 0 {
		return
	}
	// An answer counts in the interval in which it completed.
	i := int(time.Since(start) / interval)
	for len(ws.timeline) <= i {
		ws.timeline = append(ws.timeline, nil)
	}
	if ws.timeline[i] == nil {
		ws.timeline[i] = map[string]*Tally{}
	}
	tallyOf(ws.timeline[i], base).add(a)
}

func tallyOf(m map[string]*Tally, key string) *Tally {
	t, ok := m[key]
	if !ok {
		t = newTally()
		m[key] = t
	}
	return t
}

func (t *Tally) add(a answer) {
	if a.failed {
		t.failed()
		return
	}
	t.answered(a.xcache, a.isErr, a.slow, a.latency)
}

// XCacheToken is the first token of an X-Cache header value, upper-cased:
// "HIT; layer=l2" → "HIT". An empty value gives NoXCache.
func XCacheToken(v string) string {
	v = strings.TrimSpace(v)
	if i := strings.IndexAny(v, ";, \t"); i >= 0 {
		v = v[:i]
	}
	if v == "" {
		return NoXCache
	}
	return strings.ToUpper(v)
}

// ServedFromCache reports whether an X-Cache value (as sent, or as
// NormalizeXCache gives it) means the answer came from the cache without
// an origin request of its own. Tiercache says HIT or STALE, and adds
// "; coalesced" to an answer that waited on another request's fetch;
// nginx ($upstream_cache_status) says HIT, STALE or UPDATING (stale while
// its background update runs), and HIT for a request that waited on
// proxy_cache_lock. So a coalesced Tiercache answer counts as from cache,
// as nginx's lock waiters do. A REVALIDATED answer of its own waited for
// the origin's 304; nginx's MISS, EXPIRED (a stale entry fetched anew) and
// BYPASS went to the origin too.
func ServedFromCache(xcache string) bool {
	switch XCacheToken(xcache) {
	case "HIT", "STALE", "UPDATING":
		return true
	}
	return strings.Contains(strings.ToLower(xcache), "coalesced")
}

// ClientFetch reports whether an X-Cache value (NormalizeXCache) means the
// server that answered fetched the body from its origin for this very
// request, the client waiting: Tiercache's plain MISS (not "MISS;
// coalesced", which waited on another request's fetch), nginx's MISS and
// EXPIRED. KeyStats counts these per key.
func ClientFetch(xcache string) bool { return xcache == PlainMiss || xcache == "EXPIRED" }

// classify names the kind of a transport error.
func classify(err error) string {
	var ne net.Error
	switch {
	case errors.Is(err, ErrNotLoopback):
		return "not_loopback"
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection_refused"
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return "connection_reset"
	case errors.Is(err, syscall.EADDRNOTAVAIL):
		return "no_local_port"
	case errors.Is(err, syscall.EMFILE), errors.Is(err, syscall.ENFILE):
		return "too_many_open_files"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "eof"
	default:
		return "other"
	}
}

// Result is what a run measured. Its JSON form is what --json prints.
type Result struct {
	Scenario    string  `json:"scenario"`
	Concurrency int     `json:"concurrency"`
	Targets     int     `json:"targets"`
	DurationS   float64 `json:"duration_s"`
	// StoppedBy is "duration", "max-requests" or "cancelled".
	StoppedBy string `json:"stopped_by"`
	// Requests counts completed requests: answered, or failed in transport.
	Requests  int64   `json:"requests"`
	Responses int64   `json:"responses"`
	QPS       float64 `json:"qps"`
	// Errors counts transport errors and statuses other than 2xx/3xx (a 404
	// from a target meant to be missing is not an error).
	Errors       int64             `json:"errors"`
	ErrorsByKind map[string]int64  `json:"errors_by_kind"`
	ErrorSamples map[string]string `json:"error_samples,omitempty"`
	Status       map[string]int64  `json:"status"`
	// XCache counts responses by the first token of their X-Cache header;
	// XCacheDetail by the whole value ("HIT; layer=l2", "MISS; coalesced").
	XCache       map[string]int64 `json:"x_cache"`
	XCacheDetail map[string]int64 `json:"x_cache_detail"`
	// SlowXCache counts the answers that took SlowMs or longer by their
	// whole X-Cache value: where a tail comes from.
	SlowXCache map[string]int64 `json:"slow_x_cache"`
	SlowMs     float64          `json:"slow_ms"`
	// FromCache counts responses served from cache (ServedFromCache: X-Cache
	// HIT, STALE or nginx's UPDATING); HitRate is FromCache / Responses.
	FromCache int64        `json:"from_cache"`
	HitRate   float64      `json:"hit_rate"`
	Latency   Latency      `json:"latency_ms"`
	Origin    *OriginStats `json:"origin,omitempty"`
	// StartedAt is when the workers started.
	StartedAt time.Time `json:"started_at"`
	// Keys says how many distinct keys were answered and fetched.
	Keys *KeyStats `json:"keys,omitempty"`
	// Bases breaks the run down by base URL (runs over bases only).
	Bases map[string]*Tally `json:"bases,omitempty"`
	// BaseChanges lists the reloads of --bases-file that changed the list.
	BaseChanges []BaseChange `json:"base_changes,omitempty"`
	// Timeline is the run interval by interval (with --interval).
	Timeline []Interval `json:"timeline,omitempty"`

	hist Histogram
}

// Latency summarises response times in milliseconds.
type Latency struct {
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
	P99  float64 `json:"p99"`
	Max  float64 `json:"max"`
	Mean float64 `json:"mean"`
}

func newResult() *Result {
	return &Result{
		ErrorsByKind: map[string]int64{},
		ErrorSamples: map[string]string{},
		Status:       map[string]int64{},
		XCache:       map[string]int64{},
		XCacheDetail: map[string]int64{},
		SlowXCache:   map[string]int64{},
	}
}

func (r *Result) add(ws *workerStats) {
	r.hist.Merge(&ws.hist)
	r.Requests += ws.requests
	r.Responses += ws.responses
	r.Errors += ws.errors
	r.FromCache += ws.fromCache
	for k, v := range ws.errKinds {
		r.ErrorsByKind[k] += v
	}
	for k, v := range ws.errSamples {
		if _, ok := r.ErrorSamples[k]; !ok {
			r.ErrorSamples[k] = v
		}
	}
	for k, v := range ws.status {
		r.Status[strconv.Itoa(k)] += v
	}
	for k, v := range ws.xcache {
		r.XCache[k] += v
	}
	for k, v := range ws.xdetail {
		r.XCacheDetail[k] += v
	}
	for k, v := range ws.slow {
		r.SlowXCache[k] += v
	}
	for base, t := range ws.bases {
		if r.Bases == nil {
			r.Bases = map[string]*Tally{}
		}
		tallyOf(r.Bases, base).merge(t)
	}
}

func (r *Result) finish(elapsed time.Duration) {
	r.DurationS = elapsed.Seconds()
	if r.DurationS > 0 {
		r.QPS = float64(r.Requests) / r.DurationS
	}
	if r.Responses > 0 {
		r.HitRate = float64(r.FromCache) / float64(r.Responses)
	}
	ms := func(ns int64) float64 { return float64(ns) / 1e6 }
	r.Latency = Latency{
		P50:  ms(r.hist.Quantile(0.50)),
		P90:  ms(r.hist.Quantile(0.90)),
		P99:  ms(r.hist.Quantile(0.99)),
		Max:  ms(r.hist.Max()),
		Mean: r.hist.Mean() / 1e6,
	}
	for _, t := range r.Bases {
		t.finish()
	}
}

// WriteText prints the result for a person.
func (r *Result) WriteText(w io.Writer) {
	fmt.Fprintf(w, "scenario      %s (%d targets, concurrency %d, stopped by %s)\n",
		r.Scenario, r.Targets, r.Concurrency, r.StoppedBy)
	fmt.Fprintf(w, "requests      %d in %.2fs = %.0f req/s\n", r.Requests, r.DurationS, r.QPS)
	fmt.Fprintf(w, "errors        %d%s\n", r.Errors, formatCounts(r.ErrorsByKind))
	for _, k := range slices.Sorted(maps.Keys(r.ErrorSamples)) {
		fmt.Fprintf(w, "  e.g. %-18s %s\n", k+":", r.ErrorSamples[k])
	}
	fmt.Fprintf(w, "status       %s\n", formatCounts(r.Status))
	fmt.Fprintf(w, "x-cache      %s\n", formatCounts(r.XCache))
	fmt.Fprintf(w, "x-cache all  %s\n", formatCounts(r.XCacheDetail))
	fmt.Fprintf(w, "slow (>= %gms)%s\n", r.SlowMs, formatCounts(r.SlowXCache))
	fmt.Fprintf(w, "from cache    %.2f%% (HIT, STALE or UPDATING)\n", 100*r.HitRate)
	fmt.Fprintf(w, "latency ms    p50 %.3f  p90 %.3f  p99 %.3f  max %.3f  mean %.3f\n",
		r.Latency.P50, r.Latency.P90, r.Latency.P99, r.Latency.Max, r.Latency.Mean)
	if o := r.Origin; o != nil {
		fmt.Fprintf(w, "origin        %d requests (max in flight %d);%s\n", o.Requests, o.MaxInflight, formatCounts(o.ByClass))
	}
	if k := r.Keys; k != nil && k.Requested > 0 {
		fmt.Fprintf(w, "keys          %d answered, %d fetched (plain MISS), %d misses = %.2f per fetched key; by misses%s\n",
			k.Requested, k.Fetched, k.Misses, k.MissesPerFetchedKey, formatCounts(k.ByMisses))
	}
	for _, b := range slices.Sorted(maps.Keys(r.Bases)) {
		t := r.Bases[b]
		fmt.Fprintf(w, "base %s  %d requests, %d errors, mean %.3f ms;%s\n", b, t.Requests, t.Errors, t.MeanMs, formatCounts(t.XCache))
	}
	for _, c := range r.BaseChanges {
		if c.Error != "" {
			fmt.Fprintf(w, "at %6.2fs     bases file not applied: %s\n", c.T, c.Error)
		} else {
			fmt.Fprintf(w, "at %6.2fs     bases now %s\n", c.T, strings.Join(c.Bases, " "))
		}
	}
	for _, iv := range r.Timeline {
		origin := ""
		if iv.OriginRequests != nil {
			origin = fmt.Sprintf(", origin %d (%s)", *iv.OriginRequests, strings.TrimSpace(formatCounts(iv.OriginByClass)))
		}
		fmt.Fprintf(w, "t=%6.2fs      %d requests, %d errors, %d slow, mean %.3f ms%s;%s\n",
			iv.T, iv.Requests, iv.Errors, iv.Slow, iv.MeanMs, origin, formatCounts(iv.XCache))
	}
}

func formatCounts(m map[string]int64) string {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(m)) {
		fmt.Fprintf(&b, " %s=%d", k, m[k])
	}
	return b.String()
}
