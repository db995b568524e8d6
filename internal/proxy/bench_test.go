package proxy

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/tiercache/tiercache/internal/connguard"
	"github.com/tiercache/tiercache/internal/httpcache"
)

// benchFixture primes one 1 KiB entry and returns the fixture and a request
// for it.
func benchFixture(b *testing.B) (*fixture, *http.Request) {
	return hitPathFixture(b, "l1: {maxSize: 16Mi, shards: 16}", http.Header{"User-Agent": {"bench"}, "Accept": {"*/*"}})
}

// BenchmarkL1HitPath measures what a cache hit costs inside the proxy
// before any byte is written: rule match, request directives, key, L1
// lookup and decode, freshness. 1 KiB body.
func BenchmarkL1HitPath(b *testing.B) {
	f, req := benchFixture(b)
	hitPathLoop(b, f, req)
}

// hitPathLoop is the loop of BenchmarkL1HitPath: rule match, request
// directives, key, lookup and freshness of req, a stored hit in f.
func hitPathLoop(b *testing.B, f *fixture, req *http.Request) {
	p := f.px
	ctx := context.Background()
	cfg := p.cfg.Load()
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		rule := cfg.Match(req.Host, req.URL.Path, req.Header)
		rcc := httpcache.ParseRequestCC(req.Header)
		kb := p.keys.Get().(*keyBuf)
		kb.build(req, rule)
		fd := p.lookup(ctx, kb, req)
		if !fd.ok {
			b.Fatal("not a hit")
		}
		use, _ := httpcache.Evaluate(stored(fd.e), rcc, p.now())
		p.keys.Put(kb)
		if use != httpcache.UseFresh {
			b.Fatal("not a fresh hit")
		}
	}
}

// BenchmarkServeHTTPHit measures the whole handler for a hit, writing to a
// reused in-memory ResponseWriter (no network).
func BenchmarkServeHTTPHit(b *testing.B) {
	f, req := benchFixture(b)
	w := &benchWriter{h: make(http.Header, 16)}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		clear(w.h)
		w.status, w.n = 0, 0
		f.px.ServeHTTP(w, req)
		if w.status != 200 || w.n != 1024 {
			b.Fatalf("status %d, %d bytes", w.status, w.n)
		}
	}
}

type benchWriter struct {
	h      http.Header
	status int
	n      int
}

func (w *benchWriter) Header() http.Header { return w.h }
func (w *benchWriter) Write(p []byte) (int, error) {
	w.n += len(p)
	return len(p), nil
}
func (w *benchWriter) WriteHeader(s int) { w.status = s }

// BenchmarkServeHTTPStaleRefreshDeferred is a stale-while-revalidate hit
// while every refresh slot is taken (the herd's common case): it serves
// the stale copy and starts nothing.
func BenchmarkServeHTTPStaleRefreshDeferred(b *testing.B) {
	body := strings.Repeat("x", 1024)
	f := newFixture(b, "", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "public, max-age=1, stale-while-revalidate=86400")
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("ETag", `"0123456789abcdef"`)
		_, _ = io.WriteString(w, body)
	})
	if r := f.get("/bench/stale"); r.xcache() != "MISS" {
		b.Fatalf("priming: %q", r.xcache())
	}
	req := httptest.NewRequest("GET", "http://bench.example/bench/stale", nil)
	req.Host = f.srv.Listener.Addr().String()
	deadline := time.Now().Add(5 * time.Second)
	for {
		kb := f.px.keys.Get().(*keyBuf)
		kb.build(req, f.px.cfg.Load().Match(req.Host, req.URL.Path, req.Header))
		ok := f.px.lookup(context.Background(), kb, req).ok
		f.px.keys.Put(kb)
		if ok {
			break
		}
		if time.Now().After(deadline) {
			b.Fatal("the primed entry never reached L1")
		}
		time.Sleep(time.Millisecond)
	}
	f.clock.Advance(2 * time.Second)
	f.px.refreshes.n.Store(f.px.refreshes.max) // every slot taken
	w := &benchWriter{h: make(http.Header, 16)}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		clear(w.h)
		w.status, w.n = 0, 0
		f.px.ServeHTTP(w, req)
		if w.status != 200 || w.h.Get("X-Cache") != "STALE; layer=l1" {
			b.Fatalf("status %d, X-Cache %q", w.status, w.h.Get("X-Cache"))
		}
	}
	b.StopTimer()
	f.px.refreshes.n.Store(0)
}

// BenchmarkServeHTTPFileHit is BenchmarkServeHTTPHit for a 100 KiB body
// in a body file: everything a file-backed hit costs the proxy and the
// body store but the sendfile itself (the writer takes the section as
// sent, as connguard's connection does with sendfile).
func BenchmarkServeHTTPFileHit(b *testing.B) {
	const n = 100 << 10
	body := strings.Repeat("x", n)
	bodies := bodyStore(b)
	f := newFixtureWith(b, "l1: {maxSize: 16Mi, shards: 16}", newOrigin(b, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "public, max-age=3600")
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("ETag", `"0123456789abcdef"`)
		_, _ = io.WriteString(w, body)
	}), func(po *Options) { po.Bodies = bodies }, nil)
	req := httptest.NewRequest("GET", "http://bench.example/bench/file", nil)
	req.Host = f.srv.Listener.Addr().String()
	req.Header = http.Header{"User-Agent": {"bench"}, "Accept": {"*/*"}}
	w := &benchFileWriter{benchWriter: benchWriter{h: make(http.Header, 16)}}
	deadline := time.Now().Add(5 * time.Second)
	for {
		clear(w.h)
		f.px.ServeHTTP(w, req)
		if w.h.Get("X-Cache") == "HIT; layer=l1" {
			if w.regions == 0 {
				b.Fatal("the hit was not served from a body file")
			}
			break
		}
		if time.Now().After(deadline) {
			b.Fatal("never a hit")
		}
		time.Sleep(time.Millisecond)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		clear(w.h)
		w.status, w.n = 0, 0
		f.px.ServeHTTP(w, req)
		if w.status != 200 || w.n != n {
			b.Fatalf("status %d, %d bytes", w.status, w.n)
		}
	}
}

// benchFileWriter takes a body file's section as sent without reading
// it, as connguard's connection sends it with sendfile.
type benchFileWriter struct {
	benchWriter
	regions int
}

func (w *benchFileWriter) Flush() {}

func (w *benchFileWriter) ReadFrom(r io.Reader) (int64, error) {
	fr, ok := r.(connguard.FileRegion)
	if !ok {
		return io.Copy(&w.benchWriter, r)
	}
	_, _, n := fr.FileRegion()
	fr.Advance(n)
	w.n += int(n)
	w.regions++
	return n, nil
}
