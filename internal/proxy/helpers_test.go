package proxy

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tiercache/tiercache/internal/entry"
	"github.com/tiercache/tiercache/internal/invalidate"
	"github.com/tiercache/tiercache/internal/metrics"
	"github.com/tiercache/tiercache/internal/store/l1"
	"github.com/tiercache/tiercache/internal/tierconfig"
)

// clock is a settable clock; tests move it instead of sleeping.
type clock struct{ ns atomic.Int64 }

func newClock() *clock {
	c := &clock{}
	// Start at the real time: origins stamp Date from the real clock.
	c.ns.Store(time.Now().UnixNano())
	return c
}
func (c *clock) Now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *clock) Advance(d time.Duration) { c.ns.Add(int64(d)) }

// origin is a real HTTP origin that counts what reaches it.
type origin struct {
	*httptest.Server
	clock    *clock // stamps Date, so moving the clock ages responses consistently
	mu       sync.Mutex
	requests []*http.Request // copies, in arrival order
	n        atomic.Int64
}

func newOrigin(t testing.TB, h http.HandlerFunc) *origin {
	t.Helper()
	return newOriginWith(t, h, httptest.NewServer)
}

// newOriginWith is newOrigin served by serve.
func newOriginWith(t testing.TB, h http.HandlerFunc, serve func(http.Handler) *httptest.Server) *origin {
	t.Helper()
	o := &origin{clock: newClock()}
	o.Server = serve(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Date", o.clock.Now().UTC().Format(http.TimeFormat))
		o.n.Add(1)
		o.mu.Lock()
		o.requests = append(o.requests, r.Clone(context.Background()))
		o.mu.Unlock()
		h(w, r)
	}))
	t.Cleanup(o.Close)
	return o
}

// flightKey is the key of the flight a GET of path through f leads when
// nothing is stored for it and its rule keys on no request header or
// cookie: its primary key.
func (f *fixture) flightKey(path string) string {
	r := httptest.NewRequest(http.MethodGet, f.srv.URL+path, nil)
	rule, _ := f.px.cfg.Load().MatchRequest(r.Host, r.URL.EscapedPath(), r.Header)
	var kb keyBuf
	kb.build(r, rule)
	return strings.Clone(kb.Primary())
}

func (o *origin) count() int { return int(o.n.Load()) }

func (o *origin) last() *http.Request {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.requests) == 0 {
		return nil
	}
	return o.requests[len(o.requests)-1]
}

// fixture is a proxy over a real L1 in front of an origin, served over
// real HTTP.
type fixture struct {
	t      testing.TB
	px     *Proxy
	srv    *httptest.Server
	clock  *clock
	cache  *l1.Cache
	purger *invalidate.Purger
	origin *origin
}

func newFixture(t testing.TB, cfgYAML string, h http.HandlerFunc) *fixture {
	t.Helper()
	o := newOrigin(t, h)
	return newFixtureFor(t, cfgYAML, o)
}

func newFixtureFor(t testing.TB, cfgYAML string, o *origin) *fixture {
	t.Helper()
	return newFixtureWith(t, cfgYAML, o, nil, nil)
}

// newFixtureWith is newFixtureFor with a hook that completes the proxy's
// options and one that serves the proxy (default: an httptest server).
func newFixtureWith(t testing.TB, cfgYAML string, o *origin, opts func(*Options), serve func(http.Handler) *httptest.Server) *fixture {
	t.Helper()
	cfg, err := tierconfig.Parse([]byte(cfgYAML))
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	compiled, err := tierconfig.Compile(cfg)
	if err != nil {
		t.Fatalf("compile: %v", err)
	}
	holder := tierconfig.NewHolder(compiled)
	ctx, cancel := context.WithCancel(context.Background())
	cache, err := l1.New(ctx, l1.Config{
		MaxSize:      int64(compiled.Config.L1.MaxSize),
		MaxEntrySize: int64(compiled.Config.L1.MaxEntrySize),
		Shards:       compiled.Config.L1.Shards,
		LifeWindow:   24 * time.Hour,
	})
	if err != nil {
		t.Fatalf("l1: %v", err)
	}
	up, _ := url.Parse(o.URL)
	c := o.clock
	purger := invalidate.NewPurger(cache, holder)
	po := Options{
		Upstream: up, Config: holder, Store: testStore{cache}, Invalidator: purger, Now: c.Now,
	}
	if opts != nil {
		opts(&po)
	}
	px, err := New(po)
	if err != nil {
		t.Fatalf("proxy: %v", err)
	}
	if serve == nil {
		serve = httptest.NewServer
	}
	srv := serve(px)
	if tr, ok := srv.Client().Transport.(*http.Transport); ok {
		// The tests' client sends the Accept-Encoding each test gives it
		// and reads bodies as sent, as curl does: Go's own "gzip" and
		// transparent decoding would hide what the cache answered.
		tr.DisableCompression = true
	}
	t.Cleanup(func() {
		srv.Close()
		_ = px.Close(context.Background())
		cancel()
		cache.Close()
	})
	return &fixture{t: t, px: px, srv: srv, clock: c, cache: cache, purger: purger, origin: o}
}

// testStore adapts L1 to Store.
type testStore struct{ c *l1.Cache }

func (s testStore) Get(_ context.Context, key string, e *entry.Entry) (string, error) {
	return metrics.LayerL1, s.c.GetInto(key, e)
}
func (s testStore) Set(_ context.Context, key string, e *entry.Entry) error { return s.c.Set(key, e) }
func (s testStore) Delete(_ context.Context, key string) error {
	s.c.Delete(key)
	return nil
}
func (s testStore) DropLocal(key string, id [16]byte) {
	s.c.DeleteIf(key, func(e *entry.Entry) bool { return e.RefersTo(id) })
}

// response is a fully read answer.
type response struct {
	status int
	header http.Header
	body   string
}

func (r response) xcache() string { return r.header.Get("X-Cache") }

func (f *fixture) do(method, path string, hdr ...string) response {
	f.t.Helper()
	req, err := http.NewRequest(method, f.srv.URL+path, nil)
	if err != nil {
		f.t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		if hdr[i] == "Host" {
			req.Host = hdr[i+1]
			continue
		}
		req.Header.Add(hdr[i], hdr[i+1])
	}
	return f.send(req)
}

func (f *fixture) send(req *http.Request) response {
	f.t.Helper()
	resp, err := f.srv.Client().Do(req)
	if err != nil {
		f.t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		f.t.Fatalf("%s %s: reading body: %v", req.Method, req.URL, err)
	}
	return response{resp.StatusCode, resp.Header, string(b)}
}

func (f *fixture) get(path string, hdr ...string) response {
	f.t.Helper()
	return f.do("GET", path, hdr...)
}

func expect(t *testing.T, r response, status int, xcache string) {
	t.Helper()
	if r.status != status || r.xcache() != xcache {
		t.Fatalf("got %d %q, want %d %q (body %q)", r.status, r.xcache(), status, xcache, r.body)
	}
}

// cacheFor returns a handler that answers with cc and body, counting
// nothing itself (the origin wrapper counts).
func cacheFor(cc, body string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if cc != "" {
			w.Header().Set("Cache-Control", cc)
		}
		w.Header().Set("Content-Type", "text/plain")
		_, _ = io.WriteString(w, body)
	}
}

func testCounter(c prometheus.Counter) float64 { return testutil.ToFloat64(c) }
