package main

import (
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// PlainMiss is the X-Cache value of an answer the sidecar fetched from the
// origin itself for this request (not a waiter on another fetch, not a
// background refresh): counting these per key counts the fetches.
const PlainMiss = "MISS"

// NormalizeXCache is an X-Cache value as the breakdowns keep it: trimmed,
// runs of white space made one space, the first token upper-cased, so
// "hit;  layer=l2" and "HIT; layer=l2" count together. An empty value
// gives NoXCache.
func NormalizeXCache(v string) string {
	v = strings.Join(strings.Fields(v), " ")
	if v == "" {
		return NoXCache
	}
	i := strings.IndexAny(v, "; ,")
	if i < 0 {
		i = len(v)
	}
	return strings.ToUpper(v[:i]) + v[i:]
}

// Tally counts the answers of one slice of a run: one base URL, one
// interval of the timeline, or both.
type Tally struct {
	// Requests counts completed requests: answered or failed in transport.
	Requests int64 `json:"requests"`
	Errors   int64 `json:"errors"`
	// Slow counts answers that took Config.Slow or longer.
	Slow int64 `json:"slow"`
	// XCache counts answers by their whole X-Cache value (NormalizeXCache).
	XCache map[string]int64 `json:"x_cache"`
	// MeanMs is the mean latency of the answers.
	MeanMs float64 `json:"mean_ms"`

	responses int64
	latency   time.Duration
}

func newTally() *Tally { return &Tally{XCache: map[string]int64{}} }

func (t *Tally) failed() {
	t.Requests++
	t.Errors++
}

func (t *Tally) answered(xcache string, isErr, slow bool, latency time.Duration) {
	t.Requests++
	if slow {
		t.Slow++
	}
	t.responses++
	t.latency += latency
	if isErr {
		t.Errors++
	}
	if _, seen := t.XCache[xcache]; !seen && len(t.XCache) >= maxXCacheValues {
		xcache = "(other)"
	}
	t.XCache[xcache]++
}

func (t *Tally) merge(o *Tally) {
	t.Requests += o.Requests
	t.Errors += o.Errors
	t.Slow += o.Slow
	t.responses += o.responses
	t.latency += o.latency
	for k, v := range o.XCache {
		t.XCache[k] += v
	}
}

func (t *Tally) finish() {
	if t.responses > 0 {
		t.MeanMs = float64(t.latency) / float64(t.responses) / 1e6
	}
}

// keyCounters counts, per target, whether it was answered and how many
// plain MISS answers it got. Workers share them (atomics: a target's
// counters are written rarely, read on every answer only to see whether
// the first answer was already noted).
type keyCounters struct {
	answered []atomic.Uint32
	misses   []atomic.Uint32
	skip     []bool // targets meant to be missing
}

func newKeyCounters(targets []Target) *keyCounters {
	k := &keyCounters{
		answered: make([]atomic.Uint32, len(targets)),
		misses:   make([]atomic.Uint32, len(targets)),
		skip:     make([]bool, len(targets)),
	}
	for i, t := range targets {
		k.skip[i] = t.Missing
	}
	return k
}

func (k *keyCounters) record(i int, xcache string) {
	if k.skip[i] {
		return
	}
	if k.answered[i].Load() == 0 {
		k.answered[i].Store(1)
	}
	if ClientFetch(xcache) {
		k.misses[i].Add(1)
	}
}

// maxMissBucket is the last exact bucket of KeyStats.ByMisses; keys with
// more misses share the "<n>+" bucket after it.
const maxMissBucket = 8

// KeyStats says how often each key (target) was fetched, as the clients
// saw it: a plain MISS (or nginx's EXPIRED, see ClientFetch) means the
// server that answered fetched the key from its origin for that request. Targets meant to be missing (404s) are left
// out. With several base URLs, a key is a target's path: the same key
// through different servers counts once.
type KeyStats struct {
	// Requested counts keys answered at least once.
	Requested int `json:"requested"`
	// Fetched counts keys answered with a plain MISS at least once.
	Fetched int `json:"fetched"`
	// Misses counts plain MISS answers to those keys.
	Misses int64 `json:"misses"`
	// MissesPerFetchedKey is Misses / Fetched: 1 when every key was
	// fetched once across all the servers.
	MissesPerFetchedKey float64 `json:"misses_per_fetched_key"`
	// ByMisses counts fetched keys by their number of plain MISS answers:
	// "1", "2", ... "8", then "9+".
	ByMisses map[string]int64 `json:"fetched_keys_by_misses"`
}

func (k *keyCounters) stats() KeyStats {
	s := KeyStats{ByMisses: map[string]int64{}}
	for i := range k.answered {
		if k.answered[i].Load() != 0 {
			s.Requested++
		}
		m := k.misses[i].Load()
		if m == 0 {
			continue
		}
		s.Fetched++
		s.Misses += int64(m)
		b := strconv.Itoa(int(m))
		if m > maxMissBucket {
			b = strconv.Itoa(maxMissBucket+1) + "+"
		}
		s.ByMisses[b]++
	}
	if s.Fetched > 0 {
		s.MissesPerFetchedKey = float64(s.Misses) / float64(s.Fetched)
	}
	return s
}

// Interval is one step of a run's timeline.
type Interval struct {
	// T is the interval's start in seconds since the run started; Seconds
	// its length (the last one may be short).
	T       float64 `json:"t"`
	Seconds float64 `json:"seconds"`
	Tally
	// Bases breaks the interval down by base URL (runs over --base only).
	Bases map[string]*Tally `json:"bases,omitempty"`
	// OriginRequests is how many requests the origin counted in the
	// interval (with --origin-stats; polled at each interval's end).
	OriginRequests *int64 `json:"origin_requests,omitempty"`
	// OriginByClass breaks OriginRequests down as the origin's /stats
	// does ("bytes 200", "bytes conditional 304", "missing 404").
	OriginByClass map[string]int64 `json:"origin_by_class,omitempty"`
}

// BaseChange records a new list of base URLs read from --bases-file, or a
// reload that failed (the list in force stays).
type BaseChange struct {
	T     float64  `json:"t"` // seconds since the run started
	Bases []string `json:"bases,omitempty"`
	Error string   `json:"error,omitempty"`
}
