package proxy

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/andybalholm/brotli"
	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"

	"github.com/tiercache/tiercache/internal/httpcache"
	"github.com/tiercache/tiercache/internal/invalidate"
	"github.com/tiercache/tiercache/internal/tierconfig"
	"github.com/tiercache/tiercache/test/testredis"
)

// The browsers' Accept-Encoding values of issue 29.
const (
	aeChrome  = "gzip, deflate, br, zstd"
	aeSafari  = "gzip, deflate, br"
	aeFirefox = "zstd, br, gzip, deflate"
)

func gzipped(b []byte) []byte {
	var out bytes.Buffer
	zw := gzip.NewWriter(&out)
	_, _ = zw.Write(b)
	_ = zw.Close()
	return out.Bytes()
}

func brotlied(b []byte) []byte {
	var out bytes.Buffer
	zw := brotli.NewWriterLevel(&out, 5)
	_, _ = zw.Write(b)
	_ = zw.Close()
	return out.Bytes()
}

func gunzip(t testing.TB, b []byte) []byte {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("not gzip: %v", err)
	}
	out, err := io.ReadAll(zr)
	if err != nil {
		t.Fatalf("gunzip: %v", err)
	}
	return out
}

func unbrotli(t testing.TB, b []byte) []byte {
	t.Helper()
	out, err := io.ReadAll(brotli.NewReader(bytes.NewReader(b)))
	if err != nil {
		t.Fatalf("not br: %v", err)
	}
	return out
}

// compressingOrigin answers as an origin that compresses does (nginx's
// gzip and brotli modules): br when the request accepts it, else gzip,
// else identity, always with Vary: Accept-Encoding, the same ETag for
// every coding (as many origins do) and 10 minutes of freshness.
func compressingOrigin(body []byte, etag string) http.HandlerFunc {
	br, gz := brotlied(body), gzipped(body)
	return func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Cache-Control", "public, max-age=600")
		h.Set("Content-Type", "text/html; charset=utf-8")
		h.Set("Vary", "Accept-Encoding")
		h.Set("ETag", etag)
		ae := r.Header.Get("Accept-Encoding")
		out := body
		switch {
		case strings.Contains(ae, "br"):
			h.Set("Content-Encoding", "br")
			out = br
		case strings.Contains(ae, "gzip"):
			h.Set("Content-Encoding", "gzip")
			out = gz
		}
		h.Set("Content-Length", strconv.Itoa(len(out)))
		_, _ = w.Write(out)
	}
}

func purgeCount(t *testing.T, f *fixture, url string) int {
	t.Helper()
	res, err := f.purger.Purge(context.Background(), invalidate.Request{URLs: []string{url}})
	if err != nil {
		t.Fatal(err)
	}
	return res.Purged
}

func TestThreeBrowsersShareOneStoredCopy(t *testing.T) {
	body := []byte(strings.Repeat("<p>one copy for every browser</p>\n", 300))
	f := newFixture(t, "", compressingOrigin(body, `"v1"`))
	for i, ae := range []string{aeChrome, aeSafari, aeFirefox} {
		r := f.get("/page", "Accept-Encoding", ae)
		want := "HIT; layer=l1"
		if i == 0 {
			want = "MISS"
		}
		expect(t, r, 200, want)
		if ce := r.header.Get("Content-Encoding"); ce != "br" {
			t.Fatalf("%s: Content-Encoding %q, want br", ae, ce)
		}
		if got := unbrotli(t, []byte(r.body)); !bytes.Equal(got, body) {
			t.Fatalf("%s: the body decodes to %d bytes, want %d", ae, len(got), len(body))
		}
		if v := r.header.Values("Vary"); len(v) != 1 || v[0] != "Accept-Encoding" {
			t.Fatalf("%s: Vary %q, want one Accept-Encoding", ae, v)
		}
		if et := r.header.Get("ETag"); et != `"v1"` {
			t.Fatalf("%s: ETag %q, want the stored representation's", ae, et)
		}
	}
	if n := f.origin.count(); n != 1 {
		t.Fatalf("the origin saw %d requests, want 1", n)
	}
	if ae := f.origin.last().Header.Get("Accept-Encoding"); ae != "br, gzip" {
		t.Fatalf("the origin was asked with Accept-Encoding %q, want the tier's %q", ae, "br, gzip")
	}

	// curl: no Accept-Encoding. Identity, decoded, with its own tag.
	r := f.get("/page")
	expect(t, r, 200, "HIT; layer=l1")
	if r.header.Get("Content-Encoding") != "" || r.body != string(body) {
		t.Fatalf("curl got Content-Encoding %q and %d bytes, want identity and %d", r.header.Get("Content-Encoding"), len(r.body), len(body))
	}
	if cl := r.header.Get("Content-Length"); cl != strconv.Itoa(len(body)) {
		t.Fatalf("curl's Content-Length %q, want %d", cl, len(body))
	}
	if et := r.header.Get("ETag"); et != `"v1-identity"` {
		t.Fatalf("the decoded representation's ETag %q, want %q", et, `"v1-identity"`)
	}
	if v := r.header.Get("Vary"); v != "Accept-Encoding" {
		t.Fatalf("the decoded answer's Vary %q", v)
	}
	// HEAD says what GET would send.
	hr := f.do(http.MethodHead, "/page")
	if hr.header.Get("Content-Length") != strconv.Itoa(len(body)) || hr.header.Get("ETag") != `"v1-identity"` {
		t.Fatalf("HEAD: Content-Length %q, ETag %q", hr.header.Get("Content-Length"), hr.header.Get("ETag"))
	}

	// Conditional requests match the tag of what the client would get.
	expect(t, f.get("/page", "Accept-Encoding", aeChrome, "If-None-Match", `"v1"`), 304, "HIT; layer=l1")
	expect(t, f.get("/page", "If-None-Match", `"v1-identity"`), 304, "HIT; layer=l1")
	expect(t, f.get("/page", "If-None-Match", `"v1"`), 200, "HIT; layer=l1")
	expect(t, f.get("/page", "Accept-Encoding", aeSafari, "If-None-Match", `"v1-identity"`), 200, "HIT; layer=l1")

	if n := f.origin.count(); n != 1 {
		t.Fatalf("the origin saw %d requests, want 1", n)
	}
	if n := purgeCount(t, f, "/page"); n != 1 {
		t.Fatalf("purge removed %d entries, want 1", n)
	}
}

func TestAcceptEncodingEdgesAgainstOneStoredCopy(t *testing.T) {
	body := []byte(strings.Repeat("edge cases of Accept-Encoding\n", 200))
	f := newFixture(t, "", compressingOrigin(body, `"e1"`))
	expect(t, f.get("/e", "Accept-Encoding", aeChrome), 200, "MISS")

	tests := []struct {
		name, ae string
		status   int
		ce       string // the coding served; "" identity
	}{
		{"refusing identity and the stored coding is 406", "identity;q=0, gzip;q=0, br;q=0", 406, ""},
		{"*;q=0 alone refuses everything: 406", "*;q=0", 406, ""},
		{"refusing identity but taking br gets br", "identity;q=0, br", 200, "br"},
		{"br;q=0 gets identity", "gzip;q=0, br;q=0", 200, ""},
		{"only unknown codings get identity", "snappy, lz4", 200, ""},
		{"gzip alone gets identity decoded, never br", "gzip", 200, ""},
		{"an empty Accept-Encoding gets identity", " ", 200, ""},
		{"a malformed weight refuses br", "br;q=x", 200, ""},
		{"star takes br", "*", 200, "br"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := f.get("/e", "Accept-Encoding", tc.ae)
			if r.status != tc.status {
				t.Fatalf("status %d, want %d", r.status, tc.status)
			}
			if got := r.header.Get("Content-Encoding"); got != tc.ce {
				t.Fatalf("Content-Encoding %q, want %q", got, tc.ce)
			}
			if r.header.Get("Vary") != "Accept-Encoding" {
				t.Fatalf("Vary %q", r.header.Values("Vary"))
			}
			switch {
			case tc.status == 406:
			case tc.ce == "br":
				if !bytes.Equal(unbrotli(t, []byte(r.body)), body) {
					t.Fatal("br body differs")
				}
			case r.body != string(body):
				t.Fatalf("identity body of %d bytes, want %d", len(r.body), len(body))
			}
		})
	}
	if n := f.origin.count(); n != 1 {
		t.Fatalf("the origin saw %d requests, want 1: every client was served from one copy", n)
	}
}

// An origin that says gzip and sends something else: stored as received,
// served as received to clients that accept gzip, never decoded into
// garbage; a client that takes only identity goes to the origin.
func TestAnOriginThatLiesAboutItsCodingIsNeverDecoded(t *testing.T) {
	plain := "this is not gzip at all"
	f := newFixture(t, "", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=600")
		w.Header().Set("Vary", "Accept-Encoding")
		if strings.Contains(r.Header.Get("Accept-Encoding"), "gzip") {
			w.Header().Set("Content-Encoding", "gzip")
		}
		_, _ = io.WriteString(w, plain)
	})
	expect(t, f.get("/lie", "Accept-Encoding", "gzip"), 200, "MISS")
	r := f.get("/lie", "Accept-Encoding", "gzip")
	expect(t, r, 200, "HIT; layer=l1")
	if r.body != plain || r.header.Get("Content-Encoding") != "gzip" {
		t.Fatalf("served %q with %q, want it as received", r.body, r.header.Get("Content-Encoding"))
	}
	r = f.get("/lie")
	expect(t, r, 200, "MISS")
	if r.body != plain || r.header.Get("Content-Encoding") != "" {
		t.Fatalf("curl got %q with %q", r.body, r.header.Get("Content-Encoding"))
	}
	if ae := f.origin.last().Header.Get("Accept-Encoding"); ae != "" {
		t.Fatalf("the passed request reached the origin with Accept-Encoding %q, want the client's (none)", ae)
	}
	if n := f.origin.count(); n != 2 {
		t.Fatalf("origin saw %d, want 2", n)
	}
}

// A gzip body the origin cuts short (fewer bytes than its Content-Length)
// is never stored; one whose framing is whole but whose gzip stream ends
// early is stored as received and never decoded.
func TestATruncatedCompressedBody(t *testing.T) {
	body := []byte(strings.Repeat("truncated? ", 2000))
	gz := gzipped(body)
	t.Run("cut by the origin: never stored", func(t *testing.T) {
		var cut atomic.Bool
		cut.Store(true)
		f := newFixture(t, "", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Cache-Control", "max-age=600")
			w.Header().Set("Content-Encoding", "gzip")
			w.Header().Set("Content-Length", strconv.Itoa(len(gz)))
			if !cut.Swap(false) {
				_, _ = w.Write(gz)
				return
			}
			_, _ = w.Write(gz[:len(gz)/2])
			w.(http.Flusher).Flush()
			if c, _, err := w.(http.Hijacker).Hijack(); err == nil {
				c.Close()
			}
		})
		req, _ := http.NewRequest("GET", f.srv.URL+"/cut", nil)
		req.Header.Set("Accept-Encoding", "gzip")
		if resp, err := f.srv.Client().Do(req); err == nil {
			if b, err := io.ReadAll(resp.Body); err == nil {
				t.Fatalf("the cut body reached the client complete-looking (%d bytes)", len(b))
			}
			resp.Body.Close()
		}
		r := f.get("/cut", "Accept-Encoding", "gzip")
		expect(t, r, 200, "MISS")
		if !bytes.Equal(gunzip(t, []byte(r.body)), body) {
			t.Fatal("the whole body differs")
		}
		expect(t, f.get("/cut"), 200, "HIT; layer=l1")
	})
	t.Run("a gzip stream that ends early: served only as stored", func(t *testing.T) {
		short := gz[:len(gz)-20]
		f := newFixture(t, "", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Cache-Control", "max-age=600")
			if strings.Contains(r.Header.Get("Accept-Encoding"), "gzip") {
				w.Header().Set("Content-Encoding", "gzip")
				_, _ = w.Write(short)
				return
			}
			_, _ = w.Write(body)
		})
		expect(t, f.get("/short", "Accept-Encoding", "gzip"), 200, "MISS")
		r := f.get("/short", "Accept-Encoding", "gzip")
		expect(t, r, 200, "HIT; layer=l1")
		if r.body != string(short) {
			t.Fatal("not served as stored")
		}
		r = f.get("/short")
		expect(t, r, 200, "MISS")
		if r.body != string(body) {
			t.Fatalf("curl got %d bytes, want the origin's identity body", len(r.body))
		}
	})
}

// gzipBomb is a gzip stream of members that each inflate 1 MiB of zeros
// into about a kilobyte: n members inflate to n MiB.
func gzipBomb(n int) []byte {
	member := gzipped(make([]byte, 1<<20))
	return bytes.Repeat(member, n)
}

// A small body that inflates past the bound (64 MiB here, whatever the
// tier stores) is checked in a buffer's worth of memory and stops there:
// it is stored as received and never decoded for anyone. Inline, and in
// a body file (checked as it is written) with a 1 GiB maxObjectSize.
func TestADecompressionBombIsNeverDecoded(t *testing.T) {
	bomb := gzipBomb(1024) // about 1 MiB inflating to 1 GiB
	h := func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=600")
		w.Header().Set("Content-Type", "text/plain")
		if strings.Contains(r.Header.Get("Accept-Encoding"), "gzip") {
			w.Header().Set("Content-Encoding", "gzip")
			_, _ = w.Write(bomb)
			return
		}
		_, _ = io.WriteString(w, "refused")
	}
	for _, files := range []bool{false, true} {
		name := "inline"
		if files {
			name = "body file"
		}
		t.Run(name, func(t *testing.T) {
			opts := func(*Options) {}
			if files {
				bodies := bodyStore(t)
				opts = func(po *Options) { po.Bodies = bodies }
			}
			f := newFixtureWith(t, "l1: {maxSize: 64Mi, maxEntrySize: 4Mi, shards: 4}", newOrigin(t, h), opts, nil)
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			start := time.Now()
			expect(t, f.get("/bomb", "Accept-Encoding", "gzip"), 200, "MISS")
			var r response
			waitFor(t, func() bool {
				r = f.get("/bomb", "Accept-Encoding", "gzip")
				return r.xcache() == "HIT; layer=l1"
			}, "the bomb to be stored")
			took := time.Since(start)
			runtime.ReadMemStats(&after)
			if len(r.body) != len(bomb) {
				t.Fatalf("served %d bytes, want the %d stored", len(r.body), len(bomb))
			}
			if took > 20*time.Second {
				t.Fatalf("the check took %v", took)
			}
			// The bomb and its copies (origin, client, entry) are a few
			// MiB; a decode into memory would be 64 MiB or more.
			if grew := after.TotalAlloc - before.TotalAlloc; grew > 48<<20 {
				t.Fatalf("storing the bomb allocated %d MiB", grew>>20)
			}
			r = f.get("/bomb")
			expect(t, r, 200, "MISS")
			if r.body != "refused" {
				t.Fatalf("curl got %d bytes, want the origin's own answer", len(r.body))
			}
		})
	}
}

// An identity response of a type the tier compresses is stored gzipped
// once: hits go out compressed with their own tag, and decoded (the
// origin's own representation and tag) to clients that take no gzip.
func TestAnIdentityResponseIsCompressedOnceWhenStored(t *testing.T) {
	body := []byte(strings.Repeat("<li>compress me once</li>\n", 400))
	f := newFixture(t, "", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=600")
		w.Header().Set("Content-Type", "text/html")
		w.Header().Set("ETag", `"h1"`)
		w.Header().Set("Accept-Ranges", "bytes")
		_, _ = w.Write(body)
	})
	r := f.get("/h", "Accept-Encoding", aeChrome)
	expect(t, r, 200, "MISS")
	if r.body != string(body) || r.header.Get("ETag") != `"h1"` {
		t.Fatal("the fill's own client did not get the origin's response")
	}
	r = f.get("/h", "Accept-Encoding", aeChrome)
	expect(t, r, 200, "HIT; layer=l1")
	if r.header.Get("Content-Encoding") != "gzip" || r.header.Get("ETag") != `"h1-gzip"` {
		t.Fatalf("hit: Content-Encoding %q, ETag %q; want gzip, \"h1-gzip\"", r.header.Get("Content-Encoding"), r.header.Get("ETag"))
	}
	if len(r.body) >= len(body)/4 || !bytes.Equal(gunzip(t, []byte(r.body)), body) {
		t.Fatalf("hit: %d compressed bytes for %d", len(r.body), len(body))
	}
	if cl := r.header.Get("Content-Length"); cl != strconv.Itoa(len(r.body)) {
		t.Fatalf("Content-Length %q for %d bytes sent", cl, len(r.body))
	}
	if r.header.Get("Vary") != "Accept-Encoding" {
		t.Fatalf("Vary %q", r.header.Values("Vary"))
	}
	// A range of the compressed representation is of the bytes sent.
	rg := f.get("/h", "Accept-Encoding", "gzip", "Range", "bytes=0-9")
	expect(t, rg, 206, "HIT; layer=l1")
	if rg.body != r.body[:10] || rg.header.Get("Content-Range") != "bytes 0-9/"+strconv.Itoa(len(r.body)) {
		t.Fatalf("range: %q %q", rg.header.Get("Content-Range"), rg.body)
	}
	// Identity clients get the origin's representation, whole.
	id := f.get("/h", "Range", "bytes=0-9")
	expect(t, id, 200, "HIT; layer=l1")
	if id.body != string(body) || id.header.Get("ETag") != `"h1"` || id.header.Get("Content-Encoding") != "" ||
		id.header.Get("Content-Length") != strconv.Itoa(len(body)) || id.header.Get("Accept-Ranges") != "" {
		t.Fatalf("identity: %d bytes, ETag %q, CE %q, CL %q, Accept-Ranges %q", len(id.body), id.header.Get("ETag"),
			id.header.Get("Content-Encoding"), id.header.Get("Content-Length"), id.header.Get("Accept-Ranges"))
	}
	expect(t, f.get("/h", "Accept-Encoding", "gzip", "If-None-Match", `"h1-gzip"`), 304, "HIT; layer=l1")
	expect(t, f.get("/h", "Accept-Encoding", "gzip", "If-None-Match", `"h1"`), 200, "HIT; layer=l1")
	expect(t, f.get("/h", "If-None-Match", `"h1"`), 304, "HIT; layer=l1")

	// Below minSize, or of a type not listed, nothing is compressed.
	small := newFixture(t, "defaults: {contentCoding: {compress: {minSize: 64Ki}}}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=600")
		w.Header().Set("Content-Type", "text/html")
		_, _ = w.Write(body)
	})
	expect(t, small.get("/s", "Accept-Encoding", "gzip"), 200, "MISS")
	if r := small.get("/s", "Accept-Encoding", "gzip"); r.header.Get("Content-Encoding") != "" || r.body != string(body) {
		t.Fatalf("a body below minSize was compressed")
	}
}

// A response that says no-transform is stored as the origin sent it and
// never decoded or compressed by the cache (RFC 9111 §5.2.2.6).
func TestNoTransformIsServedOnlyAsStored(t *testing.T) {
	body := []byte(strings.Repeat("do not touch ", 500))
	gz := gzipped(body)
	f := newFixture(t, "", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=600, no-transform")
		w.Header().Set("Content-Type", "text/plain")
		if strings.Contains(r.Header.Get("Accept-Encoding"), "gzip") {
			w.Header().Set("Content-Encoding", "gzip")
			_, _ = w.Write(gz)
			return
		}
		_, _ = w.Write(body)
	})
	expect(t, f.get("/nt", "Accept-Encoding", "gzip"), 200, "MISS")
	expect(t, f.get("/nt", "Accept-Encoding", "gzip"), 200, "HIT; layer=l1")
	r := f.get("/nt")
	expect(t, r, 200, "MISS")
	if r.body != string(body) {
		t.Fatal("curl did not get the origin's own identity")
	}
}

// A client that does not take the coding of a fill it leads is served
// from the stored entry, decoded: it never gets a coding it did not
// accept, and the fill still makes one stored copy.
func TestTheFillsOwnClientGetsWhatItAccepts(t *testing.T) {
	body := []byte(strings.Repeat("first comes curl\n", 300))
	f := newFixture(t, "", compressingOrigin(body, `"c1"`))
	r := f.get("/first")
	expect(t, r, 200, "MISS")
	if r.header.Get("Content-Encoding") != "" || r.body != string(body) || r.header.Get("ETag") != `"c1-identity"` {
		t.Fatalf("curl's miss: CE %q, ETag %q, %d bytes", r.header.Get("Content-Encoding"), r.header.Get("ETag"), len(r.body))
	}
	r = f.get("/first", "Accept-Encoding", aeSafari)
	expect(t, r, 200, "HIT; layer=l1")
	if r.header.Get("Content-Encoding") != "br" {
		t.Fatalf("Safari's hit: CE %q", r.header.Get("Content-Encoding"))
	}
	// A response that is not stored is relayed decoded.
	nostore := newFixture(t, "", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		w.Header().Set("Content-Encoding", "gzip")
		w.Header().Set("ETag", `"n1"`)
		_, _ = w.Write(gzipped(body))
	})
	r = nostore.get("/n")
	expect(t, r, 200, "MISS")
	if r.header.Get("Content-Encoding") != "" || r.body != string(body) || r.header.Get("ETag") != `"n1-identity"` {
		t.Fatalf("unstored, decoded: CE %q, ETag %q, %d bytes", r.header.Get("Content-Encoding"), r.header.Get("ETag"), len(r.body))
	}
}

// Large bodies live in body files: served as stored from the file
// (sendfile), decoded from the file for identity clients.
func TestACodedBodyInABodyFile(t *testing.T) {
	body := payload(7, 3<<20)
	gz := gzipped(body) // random bytes: about as large as the body
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=600")
		w.Header().Set("Vary", "Accept-Encoding")
		w.Header().Set("ETag", `"big"`)
		if strings.Contains(r.Header.Get("Accept-Encoding"), "gzip") {
			w.Header().Set("Content-Encoding", "gzip")
			w.Header().Set("Content-Length", strconv.Itoa(len(gz)))
			_, _ = w.Write(gz)
			return
		}
		_, _ = w.Write(body)
	})
	bodies := bodyStore(t)
	f := newFixtureWith(t, "bodyStore: {threshold: 256Ki}", o, func(po *Options) { po.Bodies = bodies }, nil)
	r := f.get("/big", "Accept-Encoding", aeChrome)
	expect(t, r, 200, "MISS")
	if r.body != string(gz) {
		t.Fatal("the fill's client did not get the body as sent")
	}
	waitFor(t, func() bool { return f.get("/big", "Accept-Encoding", "gzip").xcache() == "HIT; layer=l1" }, "the body file to be stored")
	r = f.get("/big", "Accept-Encoding", aeSafari)
	if r.body != string(gz) || r.header.Get("Content-Encoding") != "gzip" {
		t.Fatal("a gzip client did not get the file as stored")
	}
	r = f.get("/big")
	expect(t, r, 200, "HIT; layer=l1")
	if r.header.Get("Content-Encoding") != "" || !bytes.Equal([]byte(r.body), body) || r.header.Get("Content-Length") != strconv.Itoa(len(body)) {
		t.Fatalf("identity from the file: CE %q, CL %q, %d bytes", r.header.Get("Content-Encoding"), r.header.Get("Content-Length"), len(r.body))
	}
	if r.header.Get("ETag") != `"big-identity"` {
		t.Fatalf("ETag %q", r.header.Get("ETag"))
	}
	if n := o.count(); n != 1 {
		t.Fatalf("origin saw %d requests, want 1", n)
	}

	// curl first: its fill goes to the file without it, then it is
	// served from the file, decoded.
	f2 := newFixtureWith(t, "bodyStore: {threshold: 256Ki}", o, func(po *Options) { po.Bodies = bodyStore(t) }, nil)
	r = f2.get("/big")
	expect(t, r, 200, "MISS")
	if r.header.Get("Content-Encoding") != "" || !bytes.Equal([]byte(r.body), body) || r.header.Get("ETag") != `"big-identity"` {
		t.Fatalf("curl's own fill: CE %q, ETag %q, %d bytes", r.header.Get("Content-Encoding"), r.header.Get("ETag"), len(r.body))
	}
	r = f2.get("/big", "Accept-Encoding", "gzip")
	expect(t, r, 200, "HIT; layer=l1")
	if r.body != string(gz) {
		t.Fatal("the file curl's fill stored is not the origin's gzip")
	}
}

// Passed requests keep their own Accept-Encoding: only what the cache may
// store is asked with the tier's.
func TestAPassedRequestKeepsItsAcceptEncoding(t *testing.T) {
	f := newFixture(t, `
rules:
  - name: api
    match: {pathPrefix: /api}
    bypass: true
`, cacheFor("max-age=600", "x"))
	f.get("/api/x", "Accept-Encoding", "gzip;q=0.5")
	if ae := f.origin.last().Header.Get("Accept-Encoding"); ae != "gzip;q=0.5" {
		t.Fatalf("a bypassed request reached the origin with %q", ae)
	}
	f.get("/page", "Accept-Encoding", "gzip;q=0.5")
	if ae := f.origin.last().Header.Get("Accept-Encoding"); ae != "br, gzip" {
		t.Fatalf("a fill reached the origin with %q", ae)
	}
}

// With normalize off, fills forward the client's Accept-Encoding and the
// stored copies vary by it, as before.
func TestNormalizeOffKeepsTheClientsAcceptEncoding(t *testing.T) {
	body := []byte(strings.Repeat("old way ", 300))
	f := newFixture(t, "defaults: {contentCoding: {normalize: false}}", compressingOrigin(body, `"o1"`))
	expect(t, f.get("/o", "Accept-Encoding", aeChrome), 200, "MISS")
	expect(t, f.get("/o", "Accept-Encoding", aeSafari), 200, "MISS")
	if ae := f.origin.last().Header.Get("Accept-Encoding"); ae != aeSafari {
		t.Fatalf("origin saw %q", ae)
	}
}

// A coded entry (entry versions 5 and 6) goes through L2 whole: a replica
// that did not fill it serves it as stored and decoded alike; and an
// entry an older sidecar wrote (a variant per Accept-Encoding, version 1)
// is still read and served to the client it was stored for.
func TestACodedEntryThroughL2(t *testing.T) {
	redis := testredis.Start(t)
	body := []byte(strings.Repeat("<p>shared through redis</p>\n", 300))
	o := newOrigin(t, compressingOrigin(body, `"l2"`))
	a, b := replica(t, redis.Addr(), o), replica(t, redis.Addr(), o)
	expect(t, a.get("/l2", "Host", "shop", "Accept-Encoding", aeChrome), 200, "MISS")
	var r response
	waitFor(t, func() bool { r = b.get("/l2", "Host", "shop"); return r.xcache() == "HIT; layer=l2" }, "B to find A's fill in L2")
	if r.header.Get("Content-Encoding") != "" || r.body != string(body) || r.header.Get("ETag") != `"l2-identity"` ||
		r.header.Get("Content-Length") != strconv.Itoa(len(body)) {
		t.Fatalf("B decoded: CE %q, ETag %q, CL %q, %d bytes", r.header.Get("Content-Encoding"), r.header.Get("ETag"), r.header.Get("Content-Length"), len(r.body))
	}
	r = b.get("/l2", "Host", "shop", "Accept-Encoding", aeSafari)
	expect(t, r, 200, "HIT; layer=l1")
	if r.header.Get("Content-Encoding") != "br" || !bytes.Equal(unbrotli(t, []byte(r.body)), body) {
		t.Fatalf("B as stored: CE %q", r.header.Get("Content-Encoding"))
	}
	if n := o.count(); n != 1 {
		t.Fatalf("origin saw %d requests, want 1", n)
	}

	// An older sidecar's variant: normalize off writes a plain entry
	// behind a marker that lists Accept-Encoding.
	old := replicaWith(t, redis.Addr(), o, func(po *Options) {
		cfg := po.Config.Load().Config
		off := false
		cfg.Defaults.ContentCoding.Normalize = &off
		c, err := tierconfig.Compile(cfg)
		if err != nil {
			t.Fatal(err)
		}
		po.Config = tierconfig.NewHolder(c)
	})
	expect(t, old.get("/old", "Host", "shop", "Accept-Encoding", "gzip"), 200, "MISS")
	c := replica(t, redis.Addr(), o)
	waitFor(t, func() bool {
		r = c.get("/old", "Host", "shop", "Accept-Encoding", "gzip")
		return r.xcache() == "HIT; layer=l2"
	}, "a normalizing replica to read the older entry from L2")
	if r.header.Get("Content-Encoding") != "gzip" || !bytes.Equal(gunzip(t, []byte(r.body)), body) {
		t.Fatalf("the older entry served with CE %q", r.header.Get("Content-Encoding"))
	}
}

// BenchmarkServeHTTPHitCoding measures whole hits (the handler to an
// in-memory writer) of one representation size: an identity entry, a
// gzip entry served as stored, an entry the cache compressed served as
// stored, and a gzip entry decoded for a client without Accept-Encoding
// (its decoded body is larger: the bytes written are reported).
func BenchmarkServeHTTPHitCoding(b *testing.B) {
	text := []byte(strings.Repeat("<li class=\"item\">a line of a typical html page, item 0042</li>\n", 128)) // 8 KiB
	gz := gzipped(text)
	n := len(gz)
	ident := payload(3, n)
	cases := []struct {
		name  string
		ae    string
		want  int
		serve http.HandlerFunc
	}{
		{"identity", aeChrome, n, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/octet-stream")
			_, _ = w.Write(ident)
		}},
		{"gzip-as-stored", aeChrome, n, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/html")
			w.Header().Set("Content-Encoding", "gzip")
			_, _ = w.Write(gz)
		}},
		{"compressed-by-cache-as-stored", aeChrome, -1, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/html")
			_, _ = w.Write(text)
		}},
		{"gzip-decoded", "", len(text), func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/html")
			w.Header().Set("Content-Encoding", "gzip")
			_, _ = w.Write(gz)
		}},
	}
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			f := newFixture(b, "", func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Cache-Control", "public, max-age=3600")
				w.Header().Set("ETag", `"0123456789abcdef"`)
				w.Header().Set("Vary", "Accept-Encoding")
				tc.serve(w, r)
			})
			req := httptest.NewRequest("GET", "http://bench.example/bench/coded", nil)
			req.Host = f.srv.Listener.Addr().String()
			req.Header = http.Header{"User-Agent": {"bench"}, "Accept": {"*/*"}}
			if tc.ae != "" {
				req.Header["Accept-Encoding"] = []string{tc.ae}
			}
			w := &benchWriter{h: make(http.Header, 16)}
			deadline := time.Now().Add(5 * time.Second)
			for {
				clear(w.h)
				w.status, w.n = 0, 0
				f.px.ServeHTTP(w, req)
				if w.h.Get("X-Cache") == "HIT; layer=l1" {
					break
				}
				if time.Now().After(deadline) {
					b.Fatal("never a hit")
				}
			}
			want := tc.want
			if want < 0 {
				want = w.n
			}
			b.SetBytes(int64(want))
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				clear(w.h)
				w.status, w.n = 0, 0
				f.px.ServeHTTP(w, req)
				if w.status != 200 || w.n != want {
					b.Fatalf("status %d, %d bytes, want %d", w.status, w.n, want)
				}
			}
		})
	}
}

// BenchmarkStoreCompress measures what store-time compression costs once
// per stored body (gzip at the fastest level) and what a decoded hit
// costs each time (gunzip), by body size, for choosing
// contentCoding.compress.minSize (docs/benchmarks.md).
func BenchmarkStoreCompress(b *testing.B) {
	line := "<li class=\"item\">a line of a typical html page, item 0042</li>\n"
	for _, size := range []int{256, 1 << 10, 4 << 10, 16 << 10, 64 << 10} {
		text := []byte(strings.Repeat(line, size/len(line)+1)[:size])
		var cs codecs
		gz := cs.gzipBody(text)
		b.Run("compress/"+strconv.Itoa(size), func(b *testing.B) {
			b.SetBytes(int64(size))
			b.ReportMetric(float64(len(gz))/float64(size), "ratio")
			for b.Loop() {
				cs.gzipBody(text)
			}
		})
		b.Run("decode/"+strconv.Itoa(size), func(b *testing.B) {
			b.SetBytes(int64(size))
			buf := make([]byte, 32<<10)
			for b.Loop() {
				if n, ok := cs.decodedSize(httpcache.CodingGzip, bytes.NewReader(gz), func(int64) bool { return false }, buf); !ok || n != int64(size) {
					b.Fatal("did not decode")
				}
			}
		})
	}
}

// A tier may ask for zstd: stored as the origin sent it, decoded for a
// client that does not take it; an empty originAccepts asks for identity.
func TestZstdAndIdentityOnlyTiers(t *testing.T) {
	body := []byte(strings.Repeat("zstandard for the api\n", 400))
	var zs bytes.Buffer
	zw, err := zstd.NewWriter(&zs)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = zw.Write(body)
	_ = zw.Close()
	h := func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=600")
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Vary", "Accept-Encoding")
		if strings.HasPrefix(r.Header.Get("Accept-Encoding"), "zstd") {
			w.Header().Set("Content-Encoding", "zstd")
			_, _ = w.Write(zs.Bytes())
			return
		}
		_, _ = w.Write(body)
	}
	f := newFixture(t, "defaults: {contentCoding: {originAccepts: [zstd, gzip]}}", h)
	r := f.get("/z", "Accept-Encoding", aeChrome)
	expect(t, r, 200, "MISS")
	if r.header.Get("Content-Encoding") != "zstd" || r.body != zs.String() {
		t.Fatalf("Chrome: CE %q", r.header.Get("Content-Encoding"))
	}
	r = f.get("/z", "Accept-Encoding", aeSafari)
	expect(t, r, 200, "HIT; layer=l1")
	if r.header.Get("Content-Encoding") != "" || r.body != string(body) {
		t.Fatalf("Safari (no zstd): CE %q, %d bytes", r.header.Get("Content-Encoding"), len(r.body))
	}

	id := newFixture(t, "defaults: {contentCoding: {originAccepts: [], compress: {enabled: false}}}", h)
	r = id.get("/z", "Accept-Encoding", aeChrome)
	expect(t, r, 200, "MISS")
	if ae := id.origin.last().Header.Get("Accept-Encoding"); ae != "identity" {
		t.Fatalf("an identity-only tier asked with %q", ae)
	}
	if r.header.Get("Content-Encoding") != "" || r.body != string(body) {
		t.Fatal("an identity-only tier got a coding")
	}
}

// A client that joins a fill whose body file is still growing, in a
// coding it does not take, fills for itself and gets identity; it never
// follows bytes it cannot read.
func TestAFollowerThatDoesNotTakeTheCodingFillsForItself(t *testing.T) {
	body := payload(9, 1<<20)
	gz := gzipped(body)
	release := make(chan struct{})
	var held atomic.Bool
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=600")
		w.Header().Set("Content-Encoding", "gzip")
		w.Header().Set("Content-Length", strconv.Itoa(len(gz)))
		if held.CompareAndSwap(false, true) {
			_, _ = w.Write(gz[:len(gz)/2])
			w.(http.Flusher).Flush()
			select {
			case <-release:
			case <-time.After(10 * time.Second):
			}
			_, _ = w.Write(gz[len(gz)/2:])
			return
		}
		_, _ = w.Write(gz)
	})
	f := newFixtureWith(t, "bodyStore: {threshold: 64Ki}", o, func(po *Options) { po.Bodies = bodyStore(t) }, nil)
	lead := make(chan response, 1)
	go func() { lead <- f.get("/grow", "Accept-Encoding", aeChrome) }()
	waitFor(t, func() bool { return o.count() == 1 }, "the leader's fill to reach the origin")
	r := f.get("/grow")
	close(release)
	if r.status != 200 || r.header.Get("Content-Encoding") != "" || !bytes.Equal([]byte(r.body), body) {
		t.Fatalf("the follower: %d, CE %q, %d bytes", r.status, r.header.Get("Content-Encoding"), len(r.body))
	}
	if l := <-lead; l.header.Get("Content-Encoding") != "gzip" || l.body != string(gz) {
		t.Fatalf("the leader: CE %q, %d bytes", l.header.Get("Content-Encoding"), len(l.body))
	}
	if n := o.count(); n != 2 {
		t.Fatalf("origin saw %d requests, want 2 (the follower filled for itself)", n)
	}
}

// A response that is not stored, relayed decoded to a client that does
// not take its coding, is held to the same bound: a bomb is broken off
// after 64 MiB, never decoded to its end.
func TestAnUnstoredBombRelayedDecodedIsBrokenOff(t *testing.T) {
	bomb := gzipBomb(1024)
	f := newFixture(t, "", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		w.Header().Set("Content-Encoding", "gzip")
		_, _ = w.Write(bomb)
	})
	resp, err := f.srv.Client().Get(f.srv.URL + "/nsbomb")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	n, err := io.Copy(io.Discard, resp.Body)
	if err == nil || n > 80<<20 {
		t.Fatalf("read %d bytes (err %v): want the response broken off near 64 MiB", n, err)
	}
}
