package main

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// maxBodySize bounds /bytes/<key>?size=N so a typo cannot ask for
// gigabytes; 256 MiB leaves room for the benchmark's 100 MiB object.
const maxBodySize = 256 << 20

// maxByClass bounds the distinct classes /stats counts (by_class), so odd
// paths cannot grow the map without limit.
const maxByClass = 64

// helloPeriod is how often /hello's document changes version: within one
// period its (weak) ETag and Last-Modified stay the same, so revalidation
// is answered with 304.
const helloPeriod = time.Minute

type config struct {
	Latency        time.Duration
	MaxConcurrency int
	BodySize       int
}

func (c config) validate() error {
	switch {
	case c.Latency < 0:
		return errors.New("--latency: must be >= 0")
	case c.MaxConcurrency < 0:
		return errors.New("--max-concurrency: must be >= 0")
	case c.BodySize < 0 || c.BodySize > maxBodySize:
		return fmt.Errorf("--body-size: must be between 0 and %d", maxBodySize)
	}
	return nil
}

// origin is the demo application. Every request except /stats counts, waits
// for a worker slot when the pool is limited, then waits the configured
// latency while holding the slot, as an app with a fixed worker pool would.
type origin struct {
	cfg   config
	slots chan struct{} // nil when unlimited
	now   func() time.Time
	mux   *http.ServeMux
	block []byte // pattern /bytes bodies are cut from
	memo  siteMemo

	sentBytes atomic.Int64 // body bytes written, every route but /stats

	requests    atomic.Int64
	mu          sync.Mutex // guards inflight, maxInflight, byClass, pacedDone
	inflight    int64
	maxInflight int64
	byClass     map[string]int64
	pacedDone   time.Time // when the last paced (?rate=) body was sent
}

func newOrigin(cfg config) (*origin, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	o := &origin{cfg: cfg, now: time.Now, mux: http.NewServeMux(), block: patternBlock(), byClass: map[string]int64{}}
	o.memo.m = map[string][]byte{}
	if cfg.MaxConcurrency > 0 {
		o.slots = make(chan struct{}, cfg.MaxConcurrency)
	}
	o.mux.HandleFunc("/{$}", o.index)
	o.mux.HandleFunc("/hello", o.hello)
	o.mux.HandleFunc("/time", o.time)
	o.mux.HandleFunc("/private", o.private)
	o.mux.HandleFunc("/tagged/{tag}", o.tagged)
	o.mux.HandleFunc("/bytes/{key}", o.bytes)
	o.mux.HandleFunc("/site/", o.site)
	o.mux.HandleFunc("/", o.notFound) // /missing/... and everything unknown
	return o, nil
}

func (o *origin) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/stats":
		o.stats(w, r)
		return
	case "/stats/reset":
		o.resetStats(w, r)
		return
	}
	// Counted on arrival: this is the number of requests the origin got,
	// including those whose client gave up while they queued.
	o.requests.Add(1)
	o.enter()
	defer o.leave()
	if o.slots != nil {
		select {
		case o.slots <- struct{}{}:
			defer func() { <-o.slots }()
		case <-r.Context().Done():
			return
		}
	}
	if o.cfg.Latency > 0 && !sleep(r.Context(), o.cfg.Latency) {
		return
	}
	sw := &statusWriter{ResponseWriter: w, sent: &o.sentBytes}
	defer func() { o.count(requestClass(r, sw.status())) }()
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		o.write(sw, r)
		return
	}
	o.mux.ServeHTTP(sw, r)
}

// requestClass names the kind of a served request for /stats' by_class:
// the first path segment, "conditional" when the request carried
// If-None-Match or If-Modified-Since (a cache revalidating), and the
// status, e.g. "bytes 200", "bytes conditional 304", "missing 404".
func requestClass(r *http.Request, status int) string {
	route := strings.SplitN(strings.TrimPrefix(r.URL.Path, "/"), "/", 2)[0]
	switch route {
	case "", "hello", "time", "private", "tagged", "bytes", "missing":
	case "site":
		if k := siteKind(r.URL.Path); k != "" {
			route += " " + k
		}
	default:
		route = "other"
	}
	if route == "" {
		route = "index"
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		route += " " + strings.ToLower(r.Method)
	}
	if r.Header.Get("If-None-Match") != "" || r.Header.Get("If-Modified-Since") != "" {
		route += " conditional"
	}
	return route + " " + strconv.Itoa(status)
}

func (o *origin) count(class string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if _, seen := o.byClass[class]; !seen && len(o.byClass) >= maxByClass {
		class = "(other)"
	}
	o.byClass[class]++
}

// statusWriter remembers the status a handler sent. Unwrap lets
// http.ResponseController reach the real writer (Flush for paced bodies).
type statusWriter struct {
	http.ResponseWriter
	code int
	sent *atomic.Int64 // body bytes written, counted for /stats
}

func (w *statusWriter) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(p []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	n, err := w.ResponseWriter.Write(p)
	w.sent.Add(int64(n))
	return n, err
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// status is the status sent, 0 when the handler wrote nothing (a client
// that left while queued).
func (w *statusWriter) status() int { return w.code }

func (o *origin) enter() {
	o.mu.Lock()
	o.inflight++
	o.maxInflight = max(o.maxInflight, o.inflight)
	o.mu.Unlock()
}

func (o *origin) leave() {
	o.mu.Lock()
	o.inflight--
	o.mu.Unlock()
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// stats is the response of GET /stats.
type stats struct {
	Requests int64 `json:"requests"`
	// Bytes counts the body bytes sent (as sent: compressed when the
	// answer was).
	Bytes       int64 `json:"bytes"`
	Inflight    int64 `json:"inflight"`
	MaxInflight int64 `json:"max_inflight"`
	// ByClass counts finished requests by requestClass ("bytes 200",
	// "bytes conditional 304", "missing 404"; status 0 = the client left
	// before an answer).
	ByClass map[string]int64 `json:"by_class"`
	// PacedDoneUnixNano is when the last body sent with ?rate= was
	// finished (0: none since the start or the last reset).
	PacedDoneUnixNano int64 `json:"paced_done_unix_ns"`
}

func (o *origin) snapshot() stats {
	o.mu.Lock()
	defer o.mu.Unlock()
	s := stats{Requests: o.requests.Load(), Bytes: o.sentBytes.Load(), Inflight: o.inflight, MaxInflight: o.maxInflight,
		ByClass: make(map[string]int64, len(o.byClass))}
	for k, v := range o.byClass {
		s.ByClass[k] = v
	}
	if !o.pacedDone.IsZero() {
		s.PacedDoneUnixNano = o.pacedDone.UnixNano()
	}
	return s
}

func (o *origin) stats(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	writeJSON(w, o.snapshot())
}

func (o *origin) resetStats(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", "POST")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	o.mu.Lock()
	o.requests.Store(0)
	o.sentBytes.Store(0)
	o.maxInflight = o.inflight
	clear(o.byClass)
	o.pacedDone = time.Time{}
	o.mu.Unlock()
	writeJSON(w, o.snapshot())
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(w).Encode(v)
}

const indexText = `demo-origin: an application for trying Tiercache

GET /hello            Cache-Control: public, max-age=60; ETag, Last-Modified; answers If-None-Match with 304
GET /time             Cache-Control: max-age=5; the current time
GET /private          Cache-Control: private
GET /tagged/<x>       Cache-Control: max-age=300; Surrogate-Key: demo <x>
GET /bytes/<key>      ?size=N bytes of content fixed by <key>; Cache-Control: public, max-age=1,
                      stale-while-revalidate=86400 (override with ?ttl=<seconds>&swr=<seconds>);
                      ?rate=<bytes/s> sends the body at that pace (0 = at once)
GET /site/...         a site for the browser-mix replay: *.html pages, /site/api/*.json, *.css, *.js,
                      *.jpg|png|webp on any Host; text compressed per Accept-Encoding (br, gzip) with
                      Vary: Accept-Encoding; the cookie sid=<s> gets a personal page (private or
                      no-store) whose body carries "tc-session=<s>;"
GET /missing/...      404 without caching headers
POST|PUT|DELETE any   200 "updated", never cached (an unsafe method invalidates the URL in caches)
GET /stats            {"requests":..,"bytes":..,"inflight":..,"max_inflight":..,"by_class":{"bytes 200":..},
                      "paced_done_unix_ns":..} (not counted itself)
POST /stats/reset     zero the counters
`

func (o *origin) index(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = w.Write([]byte(indexText))
}

func (o *origin) hello(w http.ResponseWriter, r *http.Request) {
	now := o.now()
	version := now.Truncate(helloPeriod)
	// Weak: bodies within one version differ only in the time they show.
	etag := fmt.Sprintf(`W/"hello-%d"`, version.Unix())
	h := w.Header()
	h.Set("Cache-Control", "public, max-age=60")
	h.Set("ETag", etag)
	h.Set("Last-Modified", version.UTC().Format(http.TimeFormat))
	if notModified(r, etag, version) {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	h.Set("Content-Type", "text/plain; charset=utf-8")
	fmt.Fprintf(w, "hello from the origin at %s\n", now.UTC().Format(time.RFC3339Nano))
}

// notModified reports whether the request's conditionals match: If-None-Match
// when present, else If-Modified-Since (skipped when modified is zero).
func notModified(r *http.Request, etag string, modified time.Time) bool {
	if inm := r.Header.Get("If-None-Match"); inm != "" {
		return etagMatch(inm, etag)
	}
	if ims := r.Header.Get("If-Modified-Since"); ims != "" && !modified.IsZero() {
		if t, err := http.ParseTime(ims); err == nil && !modified.Truncate(time.Second).After(t) {
			return true
		}
	}
	return false
}

// etagMatch is If-None-Match's weak comparison (RFC 9110 §13.1.2).
func etagMatch(inm, etag string) bool {
	for _, t := range strings.Split(inm, ",") {
		t = strings.TrimSpace(t)
		if t == "*" || strings.TrimPrefix(t, "W/") == strings.TrimPrefix(etag, "W/") {
			return true
		}
	}
	return false
}

func (o *origin) time(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "max-age=5")
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	fmt.Fprintf(w, "%s\n", o.now().UTC().Format(time.RFC3339Nano))
}

func (o *origin) private(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "private")
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	fmt.Fprintf(w, "a private page, made at %s\n", o.now().UTC().Format(time.RFC3339Nano))
}

func (o *origin) tagged(w http.ResponseWriter, r *http.Request) {
	tag := r.PathValue("tag")
	w.Header().Set("Cache-Control", "max-age=300")
	w.Header().Set("Surrogate-Key", "demo "+tag)
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	fmt.Fprintf(w, "tagged %q, made at %s\n", tag, o.now().UTC().Format(time.RFC3339Nano))
}

func (o *origin) notFound(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(http.StatusNotFound)
	_, _ = w.Write([]byte("not found\n"))
}

// write answers unsafe methods on any path: a real app would change state.
func (o *origin) write(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	fmt.Fprintf(w, "updated %s\n", r.URL.Path)
}

// bytes serves N bytes that depend only on the key: the same key and size
// always give the same body, so its ETag is strong.
func (o *origin) bytes(w http.ResponseWriter, r *http.Request) {
	key := r.PathValue("key")
	q := r.URL.Query()
	size, err := intParam(q.Get("size"), o.cfg.BodySize, maxBodySize)
	if err != nil {
		http.Error(w, "size: "+err.Error(), http.StatusBadRequest)
		return
	}
	ttl, err := intParam(q.Get("ttl"), 1, 1<<31)
	if err != nil {
		http.Error(w, "ttl: "+err.Error(), http.StatusBadRequest)
		return
	}
	swr, err := intParam(q.Get("swr"), 86400, 1<<31)
	if err != nil {
		http.Error(w, "swr: "+err.Error(), http.StatusBadRequest)
		return
	}
	rate, err := intParam(q.Get("rate"), 0, 1<<40)
	if err != nil {
		http.Error(w, "rate: "+err.Error(), http.StatusBadRequest)
		return
	}

	seed := keySeed(key)
	etag := fmt.Sprintf(`"%x-%d"`, seed, size)
	h := w.Header()
	cc := "public, max-age=" + strconv.Itoa(ttl)
	if swr > 0 {
		cc += ", stale-while-revalidate=" + strconv.Itoa(swr)
	}
	h.Set("Cache-Control", cc)
	h.Set("ETag", etag)
	if notModified(r, etag, time.Time{}) {
		w.WriteHeader(http.StatusNotModified)
		return
	}
	h.Set("Content-Type", "application/octet-stream")
	h.Set("Content-Length", strconv.Itoa(size))
	if r.Method == http.MethodHead {
		return
	}
	off := int(seed % uint64(len(o.block)))
	if rate > 0 {
		o.paced(r.Context(), w, off, size, rate)
		return
	}
	for size > 0 {
		chunk := o.block[off:]
		if len(chunk) > size {
			chunk = chunk[:size]
		}
		if _, err := w.Write(chunk); err != nil {
			return
		}
		size -= len(chunk)
		off = 0
	}
}

// pacedSlices is how many pieces a second of a paced body is cut into.
const pacedSlices = 50

// paced sends size bytes of the pattern from off at rate bytes per second:
// pieces of rate/50 bytes (at least 1, at most the pattern block), each
// flushed and sent no earlier than its share of the time, so a client
// (or a cache in between) sees the body arrive over size/rate seconds.
// The end is noted for /stats (paced_done_unix_ns) when the whole body
// was written.
func (o *origin) paced(ctx context.Context, w http.ResponseWriter, off, size, rate int) {
	rc := http.NewResponseController(w)
	piece := min(max(rate/pacedSlices, 1), len(o.block))
	start := o.now()
	sent := 0
	for sent < size {
		chunk := o.block[off:]
		chunk = chunk[:min(len(chunk), piece, size-sent)]
		if _, err := w.Write(chunk); err != nil {
			return
		}
		if err := rc.Flush(); err != nil {
			return
		}
		sent += len(chunk)
		off = (off + len(chunk)) % len(o.block)
		// When the bytes sent so far are due; wait until then.
		due := start.Add(time.Duration(float64(sent) / float64(rate) * float64(time.Second)))
		if d := due.Sub(o.now()); d > 0 && sent < size && !sleep(ctx, d) {
			return
		}
	}
	o.mu.Lock()
	o.pacedDone = o.now()
	o.mu.Unlock()
}

func intParam(s string, def, limit int) (int, error) {
	if s == "" {
		return def, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 || n > limit {
		return 0, fmt.Errorf("want an integer between 0 and %d, got %q", limit, s)
	}
	return n, nil
}

func keySeed(key string) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(key))
	return h.Sum64()
}

// patternBlock is 64 KiB of fixed pseudo-random bytes (a SHA-256 chain), so
// bodies do not compress to nothing and are the same in every process.
func patternBlock() []byte {
	const size = 64 << 10
	b := make([]byte, 0, size)
	var ctr [8]byte
	for i := uint64(0); len(b) < size; i++ {
		binary.BigEndian.PutUint64(ctr[:], i)
		sum := sha256.Sum256(ctr[:])
		b = append(b, sum[:]...)
	}
	return b
}
