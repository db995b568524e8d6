package proxy

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tiercache/tiercache/internal/bodystore"
	"github.com/tiercache/tiercache/internal/invalidate"
)

// The replay test runs independent request sequences, each on URLs of its
// own, once one after another and once 25 at a time, as the external
// conformance suite runs them against one cache. Every sequence asserts
// its cache outcomes (status, X-Cache, Age and body of every step, and the
// requests that reached the origin for each of its URLs), and the outcomes
// recorded in the two runs must be the same.
//
// Nothing in a sequence depends on timing: staleness comes from the
// origin's own headers (Age, Expires, max-age=0, no-cache), so the clock
// never moves (moving the proxy's clock would age every other sequence's
// entries too); a herd of collapsed requests is released only once all of
// them wait on the flight; a slow fill is held at the origin until the
// sequence has done what it does meanwhile; a background refresh is
// awaited until it is stored.

// replayKind is what a replay step does.
type replayKind int

const (
	stepRequest   replayKind = iota // one request, answered in full
	stepPurge                       // a purge through the Purger
	stepHold                        // a GET whose answer the origin holds until stepRelease
	stepRelease                     // let the held answer go, and check the held GET
	stepHerd                        // herd GETs at once, released once all but one wait on the flight
	stepRefreshed                   // wait until the background refresh of path is stored
)

type replayStep struct {
	kind   replayKind
	method string // default GET
	path   string // under the sequence's base
	hdr    []string
	// Expected answer (stepRequest, stepRelease, stepHerd: the first
	// client's; the others get xcache "MISS; coalesced").
	status int
	xcache string
	age    string
	body   string // "" for none; a body of the "big" kind is compared by its CRC
	herd   int
	purge  invalidate.Request // paths and prefix under the base; tags as given
	purged int                // how many responses the purge removes
}

// replaySeq is one sequence: its steps run in order under base.
type replaySeq struct {
	base  string
	steps []replayStep
}

func get(path, xcache, body string, hdr ...string) replayStep {
	return replayStep{path: path, hdr: hdr, status: 200, xcache: xcache, body: body}
}

func (s replayStep) withAge(age string) replayStep { s.age = age; return s }

func (s replayStep) as(method string, status int) replayStep {
	s.method, s.status = method, status
	return s
}

// replaySequences builds copies of every kind of sequence, each under a
// base of its own.
func replaySequences(copies int) []replaySeq {
	var seqs []replaySeq
	for i := range copies {
		b := func(kind string) string { return fmt.Sprintf("/%s/%d", kind, i) }
		tag := func(kind string) string { return fmt.Sprintf("tag-%s-%d", kind, i) }
		seqs = append(seqs,
			replaySeq{b("plain"), []replayStep{ // a fill, then hits of every form
				get("/r", "MISS", "plain v1"),
				get("/r", "HIT; layer=l1", "plain v1").withAge("0"),
				get("/r", "HIT; layer=l1", "").as(http.MethodHead, 200),
				get("/r", "HIT; layer=l1", "", "If-None-Match", `"p"`).as(http.MethodGet, 304),
				get("/r", "HIT; layer=l1", "plain", "Range", "bytes=0-4").as(http.MethodGet, 206),
			}},
			replaySeq{b("etag"), []replayStep{ // no-cache: revalidated with its ETag on every use
				get("/r", "MISS", "etag v1"),
				get("/r", "REVALIDATED", "etag v1"),
				get("/r", "REVALIDATED", "etag v1"),
			}},
			replaySeq{b("lastmod"), []replayStep{ // max-age=0: revalidated with Last-Modified
				get("/r", "MISS", "lastmod v1"),
				get("/r", "REVALIDATED", "lastmod v1"),
				get("/r", "REVALIDATED", "lastmod v1"),
			}},
			replaySeq{b("expires"), []replayStep{ // Expires and Age
				get("/stale", "MISS", "expires v1").withAge("300"),
				get("/stale", "REVALIDATED", "expires v1").withAge("0"),
				get("/stale", "HIT; layer=l1", "expires v1").withAge("0"),
				get("/fresh", "MISS", "expires v1").withAge("50"),
				get("/fresh", "HIT; layer=l1", "expires v1").withAge("50"),
			}},
			replaySeq{b("vary"), []replayStep{ // a variant per Accept-Language
				get("/r", "MISS", "vary v1 en", "Accept-Language", "en"),
				get("/r", "MISS", "vary v2 fr", "Accept-Language", "fr"),
				get("/r", "HIT; layer=l1", "vary v1 en", "Accept-Language", "en"),
				get("/r", "HIT; layer=l1", "vary v2 fr", "Accept-Language", "fr"),
				get("/r", "MISS", "vary v3 "),
				get("/r", "HIT; layer=l1", "vary v3 "),
			}},
			replaySeq{b("unsafe"), []replayStep{ // writes invalidate their own URL (RFC 9111 §4.4)
				get("/r", "MISS", "unsafe v1"),
				get("/r", "HIT; layer=l1", "unsafe v1"),
				get("/r", "BYPASS", "written").as(http.MethodPut, 200),
				get("/r", "MISS", "unsafe v3"),
				get("/r", "HIT; layer=l1", "unsafe v3"),
				get("/r", "BYPASS", "failed", "X-Fail", "1").as(http.MethodPost, 500),
				get("/r", "HIT; layer=l1", "unsafe v3"), // a failed write invalidates nothing
				get("/r", "BYPASS", "written").as(http.MethodDelete, 200),
				get("/r", "MISS", "unsafe v6"),
				get("/loc", "MISS", "unsafe v1"),
				get("/form", "BYPASS", "written", "X-Location", b("unsafe")+"/loc").as(http.MethodPost, 201),
				get("/loc", "MISS", "unsafe v2"), // invalidated through Location
			}},
			replaySeq{b("purge"), []replayStep{ // purges of its own URL, tag and prefix
				get("/a", "MISS", "purge v1"),
				get("/a", "HIT; layer=l1", "purge v1"),
				{kind: stepPurge, purge: invalidate.Request{URLs: []string{"/a"}}, purged: 1},
				get("/a", "MISS", "purge v2"),
				get("/a", "HIT; layer=l1", "purge v2"),
				{kind: stepPurge, purge: invalidate.Request{Tags: []string{tag("purge")}}, purged: 1},
				get("/a", "MISS", "purge v3"),
				get("/b", "MISS", "purge v1"),
				{kind: stepPurge, purge: invalidate.Request{Prefix: "/"}, purged: 2},
				get("/a", "MISS", "purge v4"),
				get("/b", "MISS", "purge v2"),
			}},
			replaySeq{b("slow"), []replayStep{ // a slow origin and its collapsed waiters
				{kind: stepHerd, path: "/r", herd: 5, status: 200, xcache: "MISS", body: "slow v1"},
				get("/r", "HIT; layer=l1", "slow v1"),
			}},
			replaySeq{b("writes"), []replayStep{ // issue 7: only writes of its own URL stop a slow fill's store
				{kind: stepHold, path: "/slow"},
				get("/other", "BYPASS", "written").as(http.MethodPost, 200),
				get("/other2", "BYPASS", "written").as(http.MethodPut, 200),
				{kind: stepPurge, purge: invalidate.Request{URLs: []string{"/other3"}, Tags: []string{tag("other")}}},
				{kind: stepPurge, purge: invalidate.Request{Prefix: "/oth"}},
				{kind: stepRelease, path: "/slow", status: 200, xcache: "MISS", body: "writes v1"},
				get("/slow", "HIT; layer=l1", "writes v1"),
				{kind: stepHold, path: "/own"},
				get("/own", "BYPASS", "written").as(http.MethodDelete, 200),
				{kind: stepRelease, path: "/own", status: 200, xcache: "MISS", body: "writes v1"}, // served, not stored
				get("/own", "MISS", "writes v3"),
				get("/own", "HIT; layer=l1", "writes v3"),
			}},
			replaySeq{b("swr"), []replayStep{ // stale-while-revalidate: served stale, refreshed in the background
				get("/r", "MISS", "swr v1").withAge("100"),
				get("/r", "STALE; layer=l1", "swr v1").withAge("100"),
				{kind: stepRefreshed, path: "/r"},
				get("/r", "HIT; layer=l1", "swr v2").withAge("0"),
			}},
			replaySeq{b("notfound"), []replayStep{ // negative caching (defaults.negativeTTL)
				get("/gone", "MISS", "notfound v1").as(http.MethodGet, 404),
				get("/gone", "HIT; layer=l1", "notfound v1").as(http.MethodGet, 404),
				get("/nostore", "MISS", "notfound v1").as(http.MethodGet, 404),
				get("/nostore", "MISS", "notfound v2").as(http.MethodGet, 404),
			}},
			replaySeq{b("private"), []replayStep{ // not shared: every request goes to the origin
				get("/r", "MISS", "private v1"),
				get("/r", "MISS", "private v2"),
			}},
			replaySeq{b("big"), []replayStep{ // a body file
				get("/r", "MISS", "big v1"),
				get("/r", "HIT; layer=l1", "big v1"),
				get("/r", "HIT; layer=l1", "big v1"),
			}},
		)
	}
	return seqs
}

// replayBigSize is above the body store's threshold.
const replayBigSize = 200 << 10

// replayEnv is one run: a proxy with a body store in front of an origin
// that answers each kind of sequence.
type replayEnv struct {
	f      *fileFixture
	o      *origin
	client *http.Client
	gates  sync.Map // path -> *replayGate
	// waiting counts, per flight key, the requests that wait on its
	// flight (a herd's).
	waiting sync.Map // key -> *atomic.Int32
}

// replayGate holds the origin's answer to a GET of one path.
type replayGate struct {
	arrived chan struct{} // closed when the request reaches the origin
	release chan struct{}
	once    sync.Once
}

func newReplayEnv(t *testing.T) *replayEnv {
	env := &replayEnv{}
	env.o = newOrigin(t, env.serve)
	env.f = newFileFixture(t, `
coalescing: {timeout: 60s}
defaults: {negativeTTL: 60s}
`, env.o, bodystore.Options{})
	env.f.px.flights.Waiting = func(key string) {
		if n, ok := env.waiting.Load(key); ok {
			n.(*atomic.Int32).Add(1)
		}
	}
	tr := &http.Transport{MaxIdleConnsPerHost: 64}
	t.Cleanup(tr.CloseIdleConnections)
	env.client = &http.Client{Transport: tr, Timeout: 20 * time.Second}
	return env
}

// serve is the origin: /<kind>/<n>/<rest>. A body names its kind and how
// many requests for its path the origin has seen, this one included.
func (env *replayEnv) serve(w http.ResponseWriter, r *http.Request) {
	kind, _, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
	n := 0
	env.o.mu.Lock()
	for _, q := range env.o.requests {
		if q.URL.Path == r.URL.Path {
			n++
		}
	}
	env.o.mu.Unlock()
	body := kind + " v" + strconv.Itoa(n)
	h := w.Header()
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		switch {
		case r.Header.Get("X-Fail") != "":
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = io.WriteString(w, "failed")
		case r.Header.Get("X-Location") != "":
			h.Set("Location", r.Header.Get("X-Location"))
			w.WriteHeader(http.StatusCreated)
			_, _ = io.WriteString(w, "written")
		default:
			_, _ = io.WriteString(w, "written")
		}
		return
	}
	if g, ok := env.gates.Load(r.URL.Path); ok {
		g := g.(*replayGate)
		g.once.Do(func() { close(g.arrived) })
		select {
		case <-g.release:
		case <-r.Context().Done():
			return
		case <-time.After(30 * time.Second):
		}
	}
	date := env.o.clock.Now()
	switch kind {
	case "plain":
		h.Set("Cache-Control", "max-age=300")
		h.Set("ETag", `"p"`)
	case "etag":
		h.Set("Cache-Control", "no-cache")
		h.Set("ETag", `"e"`)
		if r.Header.Get("If-None-Match") == `"e"` {
			w.WriteHeader(http.StatusNotModified)
			return
		}
	case "lastmod":
		h.Set("Cache-Control", "max-age=0")
		h.Set("Last-Modified", "Mon, 02 Jan 2006 15:04:05 GMT")
		if r.Header.Get("If-Modified-Since") != "" {
			w.WriteHeader(http.StatusNotModified)
			return
		}
	case "expires":
		h.Set("Expires", date.Add(100*time.Second).UTC().Format(http.TimeFormat))
		h.Set("ETag", `"x"`)
		if r.Header.Get("If-None-Match") == `"x"` {
			w.WriteHeader(http.StatusNotModified)
			return
		}
		if strings.HasSuffix(r.URL.Path, "/stale") {
			h.Set("Age", "300") // past Expires - Date: stale on arrival
		} else {
			h.Set("Age", "50")
		}
	case "vary":
		h.Set("Cache-Control", "max-age=300")
		h.Set("Vary", "Accept-Language")
		body += " " + r.Header.Get("Accept-Language")
	case "unsafe", "purge", "slow", "writes":
		h.Set("Cache-Control", "max-age=300")
		seq, _, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"+kind+"/"), "/")
		h.Set("Surrogate-Key", "tag-"+kind+"-"+seq)
	case "swr":
		h.Set("Cache-Control", "max-age=60, stale-while-revalidate=600")
		if n == 1 {
			h.Set("Age", "100")
		}
	case "notfound":
		if strings.HasSuffix(r.URL.Path, "/nostore") {
			h.Set("Cache-Control", "no-store")
		}
		w.WriteHeader(http.StatusNotFound)
		_, _ = io.WriteString(w, body)
		return
	case "private":
		h.Set("Cache-Control", "private, max-age=300")
	case "big":
		h.Set("Cache-Control", "max-age=300")
		b := replayBig(body)
		h.Set("Content-Length", strconv.Itoa(len(b)))
		_, _ = w.Write(b)
		return
	}
	_, _ = io.WriteString(w, body)
}

// replayBig is the body of a "big" response named name.
func replayBig(name string) []byte {
	return payload(uint64(crc32.ChecksumIEEE([]byte(name))), replayBigSize)
}

// replayed is what one request got.
type replayed struct {
	status int
	xcache string
	age    string
	body   []byte
}

func (env *replayEnv) send(ctx context.Context, method, path string, hdr []string) (replayed, error) {
	req, err := http.NewRequestWithContext(ctx, method, env.f.srv.URL+path, nil)
	if err != nil {
		return replayed{}, err
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Add(hdr[i], hdr[i+1])
	}
	resp, err := env.client.Do(req)
	if err != nil {
		return replayed{}, fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return replayed{}, fmt.Errorf("%s %s: reading the body: %w", method, path, err)
	}
	return replayed{resp.StatusCode, resp.Header.Get("X-Cache"), resp.Header.Get("Age"), b}, nil
}

// check compares what a request got with what step expects, and returns
// the outcome line recorded for the run.
func (s replayStep) check(method, path string, got replayed) (string, error) {
	want := []byte(s.body)
	if strings.HasPrefix(path, "/big/") && s.body != "" {
		want = replayBig(s.body)
	}
	line := fmt.Sprintf("%s %s: %d %q age=%q body=%08x/%d", method, path, got.status, got.xcache, got.age,
		crc32.ChecksumIEEE(got.body), len(got.body))
	if got.status != s.status || got.xcache != s.xcache || string(got.body) != string(want) ||
		(s.age != "" && got.age != s.age) {
		shown := string(got.body)
		if len(shown) > 40 {
			shown = shown[:40] + "..."
		}
		return line, fmt.Errorf("%s %s: got %d %q age %q body %q; want %d %q age %q body %q",
			method, path, got.status, got.xcache, got.age, shown, s.status, s.xcache, s.age, s.body)
	}
	return line, nil
}

// run runs seq and returns its outcome lines; it stops at the first
// difference from what the sequence expects.
func (env *replayEnv) run(ctx context.Context, seq replaySeq) ([]string, error) {
	var lines []string
	held := map[string]chan replayed{}
	for _, s := range seq.steps {
		path := seq.base + s.path
		method := s.method
		if method == "" {
			method = http.MethodGet
		}
		switch s.kind {
		case stepRequest:
			got, err := env.send(ctx, method, path, s.hdr)
			if err != nil {
				return lines, err
			}
			line, err := s.check(method, path, got)
			lines = append(lines, line)
			if err != nil {
				return lines, err
			}
		case stepPurge:
			r := s.purge
			r.URLs = nil
			for _, u := range s.purge.URLs {
				r.URLs = append(r.URLs, seq.base+u)
			}
			if s.purge.Prefix != "" {
				r.Prefix = seq.base + s.purge.Prefix
			}
			res, err := env.f.purger.Purge(ctx, r)
			if err != nil {
				return lines, fmt.Errorf("purge %+v: %w", r, err)
			}
			lines = append(lines, fmt.Sprintf("purge %+v: %d", r, res.Purged))
			if res.Purged != s.purged {
				return lines, fmt.Errorf("purge %+v removed %d responses, want %d", r, res.Purged, s.purged)
			}
		case stepHold:
			g := &replayGate{arrived: make(chan struct{}), release: make(chan struct{})}
			env.gates.Store(path, g)
			done := make(chan replayed, 1)
			go func() {
				got, err := env.send(ctx, method, path, s.hdr)
				if err != nil {
					got.status, got.xcache = -1, err.Error()
				}
				done <- got
			}()
			held[path] = done
			if err := closedWithin(ctx, g.arrived, "the held GET of "+path+" to reach the origin"); err != nil {
				return lines, err
			}
		case stepRelease:
			g, _ := env.gates.LoadAndDelete(path)
			close(g.(*replayGate).release)
			var got replayed
			select {
			case got = <-held[path]:
			case <-ctx.Done():
				return lines, fmt.Errorf("the held GET of %s: %w", path, ctx.Err())
			}
			line, err := s.check(method, path, got)
			lines = append(lines, line)
			if err != nil {
				return lines, err
			}
		case stepHerd:
			line, err := env.herd(ctx, s, path)
			lines = append(lines, line)
			if err != nil {
				return lines, err
			}
		case stepRefreshed:
			if err := env.refreshed(ctx, path); err != nil {
				return lines, err
			}
		}
	}
	return lines, nil
}

// herd sends s.herd GETs of path at once. The origin holds its answer
// until all but the first wait on the flight: then the first is the one
// fetch (s.xcache) and every other is served from it, coalesced.
func (env *replayEnv) herd(ctx context.Context, s replayStep, path string) (string, error) {
	g := &replayGate{arrived: make(chan struct{}), release: make(chan struct{})}
	env.gates.Store(path, g)
	defer env.gates.Delete(path)
	// The requests that wait on path's flight (its one fetch's).
	var waiting atomic.Int32
	key := env.f.flightKey(path)
	env.waiting.Store(key, &waiting)
	defer env.waiting.Delete(key)
	got := make(chan replayed, s.herd)
	for range s.herd {
		go func() {
			r, err := env.send(ctx, http.MethodGet, path, nil)
			if err != nil {
				r.status, r.xcache = -1, err.Error()
			}
			got <- r
		}()
	}
	if err := closedWithin(ctx, g.arrived, "the herd of "+path+" to reach the origin"); err != nil {
		close(g.release)
		return "", err
	}
	err := pollUntil(ctx, func() bool { return waiting.Load() == int32(s.herd-1) }, "the herd of "+path+" to wait on its flight")
	env.gates.Delete(path)
	close(g.release)
	if err != nil {
		return "", err
	}
	var xs []string
	for range s.herd {
		var r replayed
		select {
		case r = <-got:
		case <-ctx.Done():
			return "", fmt.Errorf("the herd of %s: %w", path, ctx.Err())
		}
		want := s
		if r.xcache != s.xcache {
			want.xcache = "MISS; coalesced"
		}
		if _, err := want.check(http.MethodGet, path, r); err != nil {
			return "", err
		}
		xs = append(xs, r.xcache)
	}
	slices.Sort(xs)
	if xs[0] != s.xcache || xs[1] != "MISS; coalesced" {
		return "", fmt.Errorf("the herd of %s got %q, want one %q and %d coalesced", path, xs, s.xcache, s.herd-1)
	}
	return fmt.Sprintf("herd of %d on %s: %q", s.herd, path, xs), nil
}

// refreshed waits until no fetch of path is running: a background
// refresh started by the step before has stored its response.
func (env *replayEnv) refreshed(ctx context.Context, path string) error {
	return pollUntil(ctx, func() bool { return !env.fetching(path) }, "the background refresh of "+path)
}

// fetching reports whether a fetch of path is running.
func (env *replayEnv) fetching(path string) bool {
	return env.f.px.flights.Running(env.f.flightKey(path)) != nil
}

// closedWithin waits for ch to close, up to 10 seconds.
func closedWithin(ctx context.Context, ch <-chan struct{}, what string) error {
	t := time.NewTimer(10 * time.Second)
	defer t.Stop()
	select {
	case <-ch:
		return nil
	case <-t.C:
		return errors.New("timed out waiting for " + what)
	case <-ctx.Done():
		return fmt.Errorf("waiting for %s: %w", what, ctx.Err())
	}
}

// pollUntil waits, up to 10 seconds, until cond holds.
func pollUntil(ctx context.Context, cond func() bool, what string) error {
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			return errors.New("timed out waiting for " + what)
		}
		if ctx.Err() != nil {
			return fmt.Errorf("waiting for %s: %w", what, ctx.Err())
		}
		time.Sleep(time.Millisecond)
	}
	return nil
}

// originLines lists the requests that reached the origin under base, one
// line per request (method, path, conditional or not), sorted.
func (env *replayEnv) originLines(base string) []string {
	env.o.mu.Lock()
	defer env.o.mu.Unlock()
	var lines []string
	for _, r := range env.o.requests {
		if !strings.HasPrefix(r.URL.Path, base+"/") {
			continue
		}
		cond := ""
		if r.Header.Get("If-None-Match") != "" || r.Header.Get("If-Modified-Since") != "" {
			cond = " conditional"
		}
		lines = append(lines, r.Method+" "+r.URL.Path+cond)
	}
	slices.Sort(lines)
	return lines
}

// wantOriginLines is what seq should have asked the origin: one request
// for each answer that is not served from the cache.
func (seq replaySeq) wantOriginLines() []string {
	var lines []string
	for _, s := range seq.steps {
		method := s.method
		if method == "" {
			method = http.MethodGet
		}
		path := seq.base + s.path
		switch {
		case s.kind == stepRefreshed, s.kind == stepHold:
			lines = append(lines, method+" "+path)
		case s.kind == stepRequest && s.xcache == "REVALIDATED":
			lines = append(lines, method+" "+path+" conditional")
		case s.kind == stepRequest && (s.xcache == "MISS" || s.xcache == "BYPASS"), s.kind == stepHerd:
			lines = append(lines, method+" "+path)
		}
	}
	slices.Sort(lines)
	return lines
}

// replayAll runs seqs on a fresh proxy, at most parallel at once, and
// returns each sequence's outcome lines (its steps', then its origin
// requests').
func replayAll(t *testing.T, seqs []replaySeq, parallel int) [][]string {
	env := newReplayEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	out := make([][]string, len(seqs))
	errs := make([]error, len(seqs))
	next := make(chan int)
	var wg sync.WaitGroup
	for range parallel {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				out[i], errs[i] = env.run(ctx, seqs[i])
			}
		}()
	}
	for i := range seqs {
		next <- i
	}
	close(next)
	wg.Wait()
	for i, seq := range seqs {
		if errs[i] != nil {
			t.Errorf("sequence %s: %v", seq.base, errs[i])
			continue
		}
		got, want := env.originLines(seq.base), seq.wantOriginLines()
		if !slices.Equal(got, want) {
			t.Errorf("sequence %s: the origin saw\n\t%s\nwant\n\t%s", seq.base, strings.Join(got, "\n\t"), strings.Join(want, "\n\t"))
		}
		out[i] = append(out[i], got...)
	}
	return out
}

func TestReplayedSequencesSeeTheSameOutcomesSerialAndInterleaved(t *testing.T) {
	seqs := replaySequences(3)
	if len(seqs) < 30 {
		t.Fatalf("%d sequences, want at least 30", len(seqs))
	}
	serial := replayAll(t, seqs, 1)
	interleaved := replayAll(t, seqs, 25)
	if t.Failed() {
		return
	}
	for i, seq := range seqs {
		if !slices.Equal(serial[i], interleaved[i]) {
			t.Errorf("sequence %s: one at a time\n\t%s\n25 at a time\n\t%s", seq.base,
				strings.Join(serial[i], "\n\t"), strings.Join(interleaved[i], "\n\t"))
		}
	}
}
