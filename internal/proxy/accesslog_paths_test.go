package proxy

import (
	"bytes"
	"context"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tiercache/tiercache/internal/accesslog"
	"github.com/tiercache/tiercache/internal/bodystore"
)

// Every way the proxy answers a request writes an access log line with
// the status the client got and the body bytes it got (none for HEAD),
// over real HTTP from a real origin: hits (inline, from a body file, 304,
// range, HEAD), misses stored inline and in body files (known and unknown
// length), passes, revalidations, HEAD updates, POST answers stored and
// not, parts (asked, served from the part, completed from it), coalesced
// waiters, origin errors (502, 504), only-if-cached's 504 and refused
// requests. A path that forgets to report what it wrote logs status 0
// and fails here.
func TestAccessLogEveryPathReportsStatusAndBytes(t *testing.T) {
	out := &lockedBuffer{}
	lg, err := accesslog.New(accesslog.Options{Writer: out, Defaults: accesslog.DefaultDefaults(), FlushInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = lg.Close(context.Background()) })

	big := bytes.Repeat([]byte("b"), 64<<10)
	rangeBody := []byte("0123456789abcdefghijklmnopqrstuvwxyz")
	release := make(chan struct{})
	slowArrived := make(chan struct{}, 1)
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		switch r.URL.Path {
		case "/fresh":
			h.Set("Cache-Control", "max-age=600")
			h.Set("ETag", `"f1"`)
			_, _ = w.Write([]byte("0123456789"))
		case "/reval":
			h.Set("Cache-Control", "max-age=1")
			h.Set("ETag", `"r1"`)
			if r.Header.Get("If-None-Match") == `"r1"` {
				w.WriteHeader(http.StatusNotModified)
				return
			}
			_, _ = w.Write([]byte("revalidate me"))
		case "/head":
			h.Set("Cache-Control", "max-age=1")
			h.Set("ETag", `"h1"`)
			h.Set("Content-Length", "9")
			_, _ = w.Write([]byte("head body"))
		case "/big":
			h.Set("Cache-Control", "max-age=600")
			h.Set("Content-Length", strconv.Itoa(len(big)))
			_, _ = w.Write(big)
		case "/big-chunked":
			h.Set("Cache-Control", "max-age=600")
			for i := 0; i < len(big); i += 8 << 10 {
				_, _ = w.Write(big[i : i+8<<10])
				http.NewResponseController(w).Flush()
			}
		case "/range":
			h.Set("Cache-Control", "max-age=600")
			h.Set("ETag", `"g1"`)
			http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(rangeBody))
		case "/slow":
			slowArrived <- struct{}{}
			<-release
			h.Set("Cache-Control", "max-age=600")
			_, _ = w.Write([]byte("slow answer"))
		case "/broken":
			panic(http.ErrAbortHandler)
		case "/hang":
			<-r.Context().Done()
		case "/post":
			h.Set("Cache-Control", "max-age=600")
			h.Set("Content-Location", "/post")
			w.WriteHeader(http.StatusCreated)
			_, _ = w.Write([]byte("created"))
		case "/post-uncached":
			w.WriteHeader(http.StatusAccepted)
			_, _ = w.Write([]byte("accepted, not stored"))
		default:
			h.Set("Cache-Control", "max-age=600")
			_, _ = w.Write([]byte("other"))
		}
	})
	cfg := `
accessLog: {queryParams: ["n"]}
origin: {responseHeaderTimeout: 300ms}
bodyStore: {threshold: 4Ki}
defaults: {updateFromHead: true, storePostResponses: true}
rules:
- name: passing
  match: {pathPrefix: /pass}
  bypass: true
- name: all
  match: {pathPrefix: /}
  cacheKey: {queryExclude: ["n"]}
`
	f := newFileFixture(t, cfg, o, bodystore.Options{}, func(po *Options) { po.AccessLog = lg })

	type sentReq struct {
		what   string
		method string
		status int
		bytes  int
	}
	var (
		mu   sync.Mutex
		sent = map[string]sentReq{} // by n
		n    int
	)
	do := func(what, method, path string, hdr ...string) response {
		t.Helper()
		mu.Lock()
		n++
		id := strconv.Itoa(n)
		mu.Unlock()
		sep := "?"
		if strings.Contains(path, "?") {
			sep = "&"
		}
		req, err := http.NewRequest(method, f.srv.URL+path+sep+"n="+id, nil)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Add(hdr[i], hdr[i+1])
		}
		resp := f.send(req)
		mu.Lock()
		sent[id] = sentReq{what: what, method: method, status: resp.status, bytes: len(resp.body)}
		mu.Unlock()
		return resp
	}
	want := func(r response, status int, xcache string) {
		t.Helper()
		if r.status != status || !strings.HasPrefix(r.xcache(), xcache) {
			t.Fatalf("got %d %q, want %d %q", r.status, r.xcache(), status, xcache)
		}
	}

	want(do("inline miss", "GET", "/fresh"), 200, "MISS")
	want(do("inline hit", "GET", "/fresh"), 200, "HIT")
	want(do("304 from a hit", "GET", "/fresh", "If-None-Match", `"f1"`), 304, "HIT")
	want(do("range of a hit", "GET", "/fresh", "Range", "bytes=2-5"), 206, "HIT")
	want(do("HEAD hit", "HEAD", "/fresh"), 200, "HIT")
	want(do("only-if-cached without an entry", "GET", "/nothing", "Cache-Control", "only-if-cached"), 504, "")
	want(do("pass", "GET", "/pass"), 200, "BYPASS")
	want(do("file miss", "GET", "/big"), 200, "MISS")
	want(do("file hit", "GET", "/big"), 200, "HIT")
	want(do("file miss of unknown length", "GET", "/big-chunked"), 200, "MISS")
	want(do("part asked", "GET", "/range", "Range", "bytes=0-9"), 206, "MISS")
	want(do("part served", "GET", "/range", "Range", "bytes=2-5"), 206, "HIT")
	want(do("part completed", "GET", "/range", "Range", "bytes=0-19"), 206, "MISS")
	want(do("stored POST answer", "POST", "/post"), 201, "BYPASS")
	want(do("POST answer not stored", "POST", "/post-uncached"), 202, "BYPASS")
	want(do("refused (gRPC)", "POST", "/grpc", "Content-Type", "application/grpc"), 501, "")
	want(do("origin broke off", "GET", "/broken"), 502, "MISS")
	want(do("origin timed out", "GET", "/hang"), 504, "MISS")
	want(do("miss to revalidate", "GET", "/reval"), 200, "MISS")
	want(do("miss to update by HEAD", "GET", "/head"), 200, "MISS")
	f.clock.Advance(10 * time.Second)
	want(do("revalidated", "GET", "/reval"), 200, "REVALIDATED")
	want(do("HEAD update", "HEAD", "/head"), 200, "REVALIDATED")

	// A leader and a waiter coalesced on one fill.
	var wg sync.WaitGroup
	results := make(chan response, 2)
	wg.Go(func() { results <- do("coalesced leader", "GET", "/slow") })
	select {
	case <-slowArrived:
	case <-time.After(5 * time.Second):
		t.Fatal("the leader's fill never reached the origin")
	}
	before := testCounter(f.px.m.Coalesced)
	wg.Go(func() { results <- do("coalesced waiter", "GET", "/slow") })
	waitFor(t, func() bool { return testCounter(f.px.m.Coalesced) > before }, "the waiter to join the fill")
	close(release)
	wg.Wait()
	close(results)
	var xc []string
	for r := range results {
		if r.status != 200 {
			t.Fatalf("coalesced request got %d", r.status)
		}
		xc = append(xc, r.xcache())
	}
	if !strings.Contains(strings.Join(xc, ","), "coalesced") {
		t.Fatalf("X-Cache %v: no request was coalesced", xc)
	}

	// A client may have its last byte before its handler logs: closing
	// the server waits for every handler to return.
	f.srv.Close()
	lines := logLines(t, lg, out)
	seen := map[string]bool{}
	for _, l := range lines {
		q, _ := l["query"].(string)
		v, err := url.ParseQuery(q)
		id := v.Get("n")
		if err != nil || id == "" {
			t.Errorf("line without its request's n: %v", l)
			continue
		}
		s, ok := sent[id]
		if !ok || seen[id] {
			t.Errorf("line for no request or twice: %v", l)
			continue
		}
		seen[id] = true
		wantBytes := s.bytes
		if s.method == http.MethodHead {
			wantBytes = 0
		}
		if l["status"] != float64(s.status) || l["bytes"] != float64(wantBytes) || l["method"] != s.method {
			t.Errorf("%s: line %v, want %s status %d bytes %d", s.what, l, s.method, s.status, wantBytes)
		}
	}
	for id, s := range sent {
		if !seen[id] {
			t.Errorf("%s (n=%s): no access log line", s.what, id)
		}
	}
}
