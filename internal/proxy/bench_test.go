package proxy

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/tiercache/tiercache/internal/httpcache"
)

// benchFixture primes one 1 KiB entry and returns the fixture and a request
// for it.
func benchFixture(b *testing.B) (*fixture, *http.Request) {
	body := strings.Repeat("x", 1024)
	f := newFixture(b, "l1: {maxSize: 16Mi, shards: 16}", func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Cache-Control", "public, max-age=3600")
		h.Set("Content-Type", "text/plain; charset=utf-8")
		h.Set("ETag", `"0123456789abcdef"`)
		h.Set("Last-Modified", "Mon, 02 Jan 2006 15:04:05 GMT")
		_, _ = io.WriteString(w, body)
	})
	if r := f.get("/bench/item?id=42"); r.xcache() != "MISS" {
		b.Fatalf("priming: %q", r.xcache())
	}
	req := httptest.NewRequest("GET", "http://bench.example/bench/item?id=42", nil)
	req.Host = f.srv.Listener.Addr().String()
	req.Header.Set("User-Agent", "bench")
	req.Header.Set("Accept", "*/*")
	// The fill stores its entry after the last body byte went out: wait
	// for it rather than race it.
	deadline := time.Now().Add(5 * time.Second)
	for {
		kb := f.px.keys.Get().(*keyBuf)
		kb.build(req, f.px.cfg.Load().Match(req.URL.Path, req.Header))
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
	return f, req
}

// BenchmarkL1HitPath measures what a cache hit costs inside the proxy
// before any byte is written: rule match, request directives, key, L1
// lookup and decode, freshness. 1 KiB body.
func BenchmarkL1HitPath(b *testing.B) {
	f, req := benchFixture(b)
	p := f.px
	ctx := context.Background()
	cfg := p.cfg.Load()
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		rule := cfg.Match(req.URL.Path, req.Header)
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
		kb.build(req, f.px.cfg.Load().Match(req.URL.Path, req.Header))
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
