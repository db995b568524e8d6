package proxy

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tiercache/tiercache/internal/bodystore"
	"github.com/tiercache/tiercache/internal/connguard"
	"github.com/tiercache/tiercache/internal/entry"
	"github.com/tiercache/tiercache/internal/metrics"
	"github.com/tiercache/tiercache/test/testredis"
)

// fileFixture is a fixture whose proxy keeps large bodies in a real body
// store, served the way the sidecar serves (connguard's listener and
// middleware), over a listener that records what reaches each
// connection's ReadFrom.
type fileFixture struct {
	*fixture
	bodies *bodystore.Store
	dir    string
	m      *metrics.Metrics
	reg    *prometheus.Registry
	rec    *readFromLog
}

func newFileFixture(t *testing.T, cfgYAML string, o *origin, bo bodystore.Options, more ...func(*Options)) *fileFixture {
	t.Helper()
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if bo.Dir == "" {
		bo.Dir = t.TempDir()
	}
	if bo.MaxBytes == 0 {
		bo.MaxBytes = 8 << 30
	}
	bo.Metrics, bo.Logger = m, slog.New(slog.DiscardHandler)
	bodies, rec, err := bodystore.Open(t.Context(), bo)
	if err != nil {
		t.Fatal(err)
	}
	if len(rec) != 0 {
		t.Fatalf("a fresh body dir recovered %d bodies", len(rec))
	}
	t.Cleanup(func() { _ = bodies.Close() }) // after the proxy's own cleanup
	log := &readFromLog{}
	f := newFixtureWith(t, cfgYAML, o, func(po *Options) {
		po.Bodies, po.Metrics = bodies, m
		for _, fn := range more {
			fn(po)
		}
	}, func(h http.Handler) *httptest.Server {
		srv := httptest.NewUnstartedServer(connguard.Middleware(h))
		// The recorder sits between net/http and connguard's
		// connection, so that it sees what the response hands to that
		// connection's ReadFrom: a *bodystore.Section (a
		// connguard.FileRegion, which it sends with sendfile:
		// connguard's TestAFileRegionIsSentWithSendfileFromItsOffset) or
		// a file of a fill in progress (which the TCP connection's
		// ReadFrom sends with sendfile).
		srv.Config.ConnContext = func(ctx context.Context, c net.Conn) context.Context {
			if rc, ok := c.(*recordingConn); ok {
				c = rc.Conn
			}
			return connguard.ConnContext(ctx, c)
		}
		// With the sidecar's default send timeout, so that file bodies
		// take the path they take in production (re-armed sendfile).
		srv.Listener = &recordingListener{Listener: connguard.Listener(srv.Listener, connguard.SendTimeout(connguard.DefaultSendTimeout)), log: log}
		srv.Start()
		return srv
	})
	return &fileFixture{fixture: f, bodies: bodies, dir: bo.Dir, m: m, reg: reg, rec: log}
}

// readFromLog collects the dynamic types of the sources handed to the
// ReadFrom of the connections a recordingListener accepted.
type readFromLog struct {
	mu   sync.Mutex
	seen []string
}

func (l *readFromLog) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.seen
	l.seen = nil
	return s
}

type recordingListener struct {
	net.Listener
	log *readFromLog
}

func (l *recordingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &recordingConn{Conn: c, log: l.log}, nil
}

// recordingConn records the source of every ReadFrom, then delegates to
// connguard's connection's.
type recordingConn struct {
	net.Conn
	log *readFromLog
}

// CloseWrite is what net/http looks for on the connection it holds.
func (c *recordingConn) CloseWrite() error {
	return c.Conn.(interface{ CloseWrite() error }).CloseWrite()
}

func (c *recordingConn) ReadFrom(r io.Reader) (int64, error) {
	name := fmt.Sprintf("%T", r)
	if lr, ok := r.(*io.LimitedReader); ok {
		name = fmt.Sprintf("%T(%T)", lr, lr.R)
	}
	c.log.mu.Lock()
	c.log.seen = append(c.log.seen, name)
	c.log.mu.Unlock()
	return c.Conn.(io.ReaderFrom).ReadFrom(r)
}

// files lists the committed body files, and the temp files.
func (f *fileFixture) files() (bodies, temps []string) {
	f.t.Helper()
	bodies, _ = filepath.Glob(filepath.Join(f.dir, "*.body"))
	temps, _ = filepath.Glob(filepath.Join(f.dir, "*.tmp"))
	return bodies, temps
}

// stored returns the entry stored for GET path (no Vary), or nil.
func (f *fileFixture) stored(path string) *entry.Entry {
	req := httptest.NewRequest(http.MethodGet, f.srv.URL+path, nil)
	kb := f.px.keys.Get().(*keyBuf)
	defer f.px.keys.Put(kb)
	kb.build(req, f.px.cfg.Load().Match(req.Host, req.URL.Path, req.Header))
	got := f.px.lookup(context.Background(), kb, req)
	if !got.ok {
		return nil
	}
	return detach(got.e)
}

// waitStored waits until path's response is stored and returns it.
func (f *fileFixture) waitStored(t *testing.T, path string) *entry.Entry {
	t.Helper()
	var e *entry.Entry
	waitFor(t, func() bool { e = f.stored(path); return e != nil }, "the fill of "+path+" to be stored")
	return e
}

// bodyErrors returns tiercache_body_store_errors_total{op}.
func (f *fileFixture) bodyErrors(op string) float64 {
	f.t.Helper()
	mfs, err := f.reg.Gather()
	if err != nil {
		f.t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "tiercache_body_store_errors_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "op" && l.GetValue() == op {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// payload returns n bytes that differ with seed.
func payload(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, uint64(n)))
	b := make([]byte, n)
	for i := 0; i < n; i += 8 {
		v := r.Uint64()
		for j := 0; j < 8 && i+j < n; j++ {
			b[i+j] = byte(v >> (8 * j))
		}
	}
	return b
}

// bodies answers each path with its own payload of n bytes, cacheable,
// with an ETag and a Content-Length.
func bodies(n int) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		seed := uint64(len(r.URL.Path)) + uint64(r.URL.Path[len(r.URL.Path)-1])
		b := payload(seed, n)
		h := w.Header()
		h.Set("Cache-Control", "max-age=300")
		h.Set("Content-Type", "application/octet-stream")
		h.Set("ETag", `"`+r.URL.Path+`"`)
		h.Set("Content-Length", strconv.Itoa(n))
		_, _ = w.Write(b)
	}
}

func bodyFor(path string, n int) []byte {
	return payload(uint64(len(path))+uint64(path[len(path)-1]), n)
}

// expectBody is expect for bodies too large to print.
func expectBody(t *testing.T, r response, status int, xcache string, want []byte) {
	t.Helper()
	if r.status != status || r.xcache() != xcache || !bytes.Equal([]byte(r.body), want) {
		t.Fatalf("got %d %q with %d bytes, want %d %q with %d (equal prefix %d)",
			r.status, r.xcache(), len(r.body), status, xcache, len(want), commonPrefix([]byte(r.body), want))
	}
}

func commonPrefix(a, b []byte) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

const fileSize = 256 << 10 // above the default 64Ki threshold

func TestAFileBackedHitIsSentWithSendfile(t *testing.T) {
	f := newFileFixture(t, "", newOrigin(t, bodies(fileSize)), bodystore.Options{})
	want := bodyFor("/big", fileSize)
	expectBody(t, f.get("/big"), 200, "MISS", want)
	e := f.waitStored(t, "/big")
	if e.File == nil || e.File.Size != fileSize || len(e.Body) != 0 {
		t.Fatalf("stored entry: file %+v, %d inline bytes; want a %d-byte body file", e.File, len(e.Body), fileSize)
	}
	if b, _ := f.files(); len(b) != 1 {
		t.Fatalf("%d body files, want 1", len(b))
	}
	f.rec.take()

	expectBody(t, f.get("/big"), 200, "HIT; layer=l1", want)
	if got := f.rec.take(); !slices.Equal(got, []string{"*bodystore.Section"}) {
		t.Fatalf("the connection's ReadFrom saw %q, want the body file once", got)
	}
	r := f.get("/big", "Range", "bytes=1000-100999")
	expectBody(t, r, 206, "HIT; layer=l1", want[1000:101000])
	if cr := r.header.Get("Content-Range"); cr != "bytes 1000-100999/"+strconv.Itoa(fileSize) {
		t.Fatalf("Content-Range %q", cr)
	}
	if got := f.rec.take(); !slices.Equal(got, []string{"*bodystore.Section"}) {
		t.Fatalf("a range: the connection's ReadFrom saw %q, want the body file once", got)
	}
	expect(t, f.get("/big", "Range", "bytes=9999999-"), 416, "HIT; layer=l1")
	if n := f.origin.count(); n != 1 {
		t.Fatalf("the origin saw %d requests, want 1", n)
	}
}

func TestHeadAnd304OnAFileBackedEntryOpenNothing(t *testing.T) {
	f := newFileFixture(t, "", newOrigin(t, bodies(fileSize)), bodystore.Options{})
	want := bodyFor("/big", fileSize)
	expectBody(t, f.get("/big"), 200, "MISS", want)
	f.waitStored(t, "/big")
	// With the file gone, only a request that opens it can notice.
	files, _ := f.files()
	for _, p := range files {
		if err := os.Remove(p); err != nil {
			t.Fatal(err)
		}
	}
	head := f.do(http.MethodHead, "/big")
	expect(t, head, 200, "HIT; layer=l1")
	if cl := head.header.Get("Content-Length"); cl != strconv.Itoa(fileSize) {
		t.Fatalf("HEAD Content-Length %q, want %d", cl, fileSize)
	}
	expect(t, f.get("/big", "If-None-Match", `"/big"`), 304, "HIT; layer=l1")
	if n := f.origin.count(); n != 1 {
		t.Fatalf("HEAD and 304 reached the origin: %d requests", n)
	}
	// A GET needs the body: the entry is a miss and is fetched again.
	expectBody(t, f.get("/big"), 200, "MISS", want)
	if n := f.origin.count(); n != 2 {
		t.Fatalf("the origin saw %d requests, want 2", n)
	}
	if f.bodyErrors(metrics.BodyOpOpen) < 1 {
		t.Fatal("the missing file was not counted")
	}
	f.waitStored(t, "/big")
	expectBody(t, f.get("/big"), 200, "HIT; layer=l1", want)
}

func TestABodyFileSwappedForAnotherKeysIsNeverServed(t *testing.T) {
	f := newFileFixture(t, "", newOrigin(t, bodies(fileSize)), bodystore.Options{})
	wantA, wantB := bodyFor("/a", fileSize), bodyFor("/b", fileSize)
	expectBody(t, f.get("/a"), 200, "MISS", wantA)
	a := f.waitStored(t, "/a")
	expectBody(t, f.get("/b"), 200, "MISS", wantB)
	b := f.waitStored(t, "/b")
	pathOf := func(e *entry.Entry) string { return filepath.Join(f.dir, fmt.Sprintf("%x.body", e.File.ID)) }
	// /b's file now lies under /a's name.
	if err := os.Rename(pathOf(b), pathOf(a)); err != nil {
		t.Fatal(err)
	}
	expectBody(t, f.get("/a"), 200, "MISS", wantA)
	expectBody(t, f.get("/b"), 200, "MISS", wantB)
	if n := f.origin.count(); n != 4 {
		t.Fatalf("the origin saw %d requests, want 4", n)
	}
}

// rawOrigin answers every request on its own terms: it writes head, then
// body, then closes the connection.
func rawOrigin(t *testing.T, head string, body []byte) *origin {
	t.Helper()
	return newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		conn, buf, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		defer conn.Close()
		_, _ = buf.WriteString(head)
		_, _ = buf.Write(body)
		_ = buf.Flush()
	})
}

func TestABrokenOffOriginBodyStoresNothingAndBreaksTheResponse(t *testing.T) {
	part := payload(7, 192<<10)
	chunked := func() []byte {
		var b bytes.Buffer
		for i := 0; i < len(part); i += 32 << 10 {
			fmt.Fprintf(&b, "%x\r\n%s\r\n", 32<<10, part[i:i+32<<10])
		}
		return b.Bytes() // no last chunk
	}()
	for _, tc := range []struct {
		name, head string
		body       []byte
	}{
		{"a Content-Length above what the origin sends", "HTTP/1.1 200 OK\r\nCache-Control: max-age=300\r\nContent-Length: 300000\r\n\r\n", part},
		{"a chunked body cut before its last chunk", "HTTP/1.1 200 OK\r\nCache-Control: max-age=300\r\nTransfer-Encoding: chunked\r\n\r\n", chunked},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFileFixture(t, "", rawOrigin(t, tc.head, tc.body), bodystore.Options{})
			resp, err := f.srv.Client().Get(f.srv.URL + "/cut")
			if err != nil {
				t.Fatal(err)
			}
			got, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err == nil {
				t.Fatalf("the client read %d bytes and a complete response", len(got))
			}
			if !bytes.Equal(got, part[:len(got)]) {
				t.Fatal("the client got other bytes than the origin sent")
			}
			// The fill ends after the client's response: wait for the
			// temp file to go.
			waitFor(t, func() bool { b, tmp := f.files(); return len(b) == 0 && len(tmp) == 0 }, "the temp file to be removed")
			if e := f.stored("/cut"); e != nil {
				t.Fatalf("a cut body was stored: %+v", e)
			}
		})
	}
}

func TestAContentLengthBelowWhatTheOriginSendsStoresWhatTheClientGot(t *testing.T) {
	// By its framing the message ends after Content-Length bytes: that is
	// the response the client gets and the cache keeps, and the excess
	// never reaches anyone.
	sent := payload(9, 300<<10)
	const cl = 100 << 10
	f := newFileFixture(t, "", rawOrigin(t, "HTTP/1.1 200 OK\r\nCache-Control: max-age=300\r\nContent-Length: "+strconv.Itoa(cl)+"\r\n\r\n", sent), bodystore.Options{})
	expectBody(t, f.get("/low"), 200, "MISS", sent[:cl])
	e := f.waitStored(t, "/low")
	if e.File == nil || e.File.Size != cl {
		t.Fatalf("stored %+v, want a %d-byte file", e.File, cl)
	}
	expectBody(t, f.get("/low"), 200, "HIT; layer=l1", sent[:cl])
}

// heldOrigin sends the first half of a cacheable body of n bytes (with a
// Content-Length unless chunked), then waits for release (or for its
// request to end) before the rest; cut breaks the response off instead.
type heldOrigin struct {
	*origin
	body      []byte
	firstHalf chan struct{}
	release   chan struct{}
	cut       bool
	// cc is the Cache-Control sent (default max-age=300); from holdFrom
	// on (counting requests from 1; default 1) requests are held.
	cc       string
	holdFrom int
	vary     string // Vary sent, if any
}

func newHeldOrigin(t *testing.T, n int, cut bool) *heldOrigin {
	h := &heldOrigin{body: payload(11, n), firstHalf: make(chan struct{}, 4), release: make(chan struct{}), cut: cut}
	h.origin = newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet {
			return
		}
		cc := "max-age=300"
		if h.cc != "" {
			cc = h.cc
		}
		w.Header().Set("Cache-Control", cc)
		w.Header().Set("Content-Length", strconv.Itoa(len(h.body)))
		if h.vary != "" {
			w.Header().Set("Vary", h.vary)
		}
		if h.origin.count() < h.holdFrom {
			_, _ = w.Write(h.body)
			return
		}
		half := len(h.body) / 2
		_, _ = w.Write(h.body[:half])
		http.NewResponseController(w).Flush()
		h.firstHalf <- struct{}{}
		select {
		case <-h.release:
		case <-r.Context().Done():
			return
		}
		if h.cut {
			panic(http.ErrAbortHandler)
		}
		_, _ = w.Write(h.body[half:])
	})
	return h
}

// holding waits (up to 5s) until the origin has sent a first half and
// holds the rest.
func (h *heldOrigin) holding(t *testing.T) {
	t.Helper()
	select {
	case <-h.firstHalf:
	case <-time.After(5 * time.Second):
		t.Fatal("the origin was not asked within 5s")
	}
}

// started sends GET path and returns its response once the headers are
// in; the body is the caller's to read.
func (f *fileFixture) started(t *testing.T, ctx context.Context, path string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, f.srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := f.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return resp
}

// readN reads exactly n bytes of r within 5 seconds.
func readN(t *testing.T, r io.Reader, n int) []byte {
	t.Helper()
	got := make(chan []byte, 1)
	go func() {
		b := make([]byte, n)
		k, _ := io.ReadFull(r, b)
		got <- b[:k]
	}()
	select {
	case b := <-got:
		if len(b) != n {
			t.Fatalf("read %d bytes, want %d", len(b), n)
		}
		return b
	case <-time.After(5 * time.Second):
		t.Fatalf("%d bytes did not come within 5s", n)
		return nil
	}
}

func TestWaitersStreamFromTheGrowingFile(t *testing.T) {
	o := newHeldOrigin(t, 512<<10, false)
	f := newFileFixture(t, "", o.origin, bodystore.Options{})
	half := len(o.body) / 2
	leader := f.started(t, t.Context(), "/grow")
	if !bytes.Equal(readN(t, leader.Body, half), o.body[:half]) {
		t.Fatal("the leader's first half differs")
	}
	waiter := f.started(t, t.Context(), "/grow")
	if x := waiter.Header.Get("X-Cache"); x != "MISS; coalesced" || waiter.ContentLength != int64(len(o.body)) {
		t.Fatalf("waiter: X-Cache %q, Content-Length %d", x, waiter.ContentLength)
	}
	// The origin still holds the second half: what the waiter reads
	// comes from the file as it is.
	if !bytes.Equal(readN(t, waiter.Body, half), o.body[:half]) {
		t.Fatal("the waiter's first half differs")
	}
	close(o.release)
	for name, resp := range map[string]*http.Response{"leader": leader, "waiter": waiter} {
		rest, err := io.ReadAll(resp.Body)
		if err != nil || !bytes.Equal(rest, o.body[half:]) {
			t.Fatalf("%s: second half of %d bytes (err %v), want %d", name, len(rest), err, len(o.body)-half)
		}
	}
	// The waiter was sent the file's pieces with sendfile.
	if got := f.rec.take(); len(got) == 0 || !slices.Contains(got, "*io.LimitedReader(*os.File)") {
		t.Fatalf("the connections' ReadFrom saw %q, want pieces of the body file", got)
	}
	f.waitStored(t, "/grow")
	expectBody(t, f.get("/grow"), 200, "HIT; layer=l1", o.body)
	if n := f.origin.count(); n != 1 {
		t.Fatalf("the origin saw %d requests, want 1", n)
	}
}

func TestFollowersOfABrokenOffFillGetABrokenResponse(t *testing.T) {
	o := newHeldOrigin(t, 512<<10, true)
	f := newFileFixture(t, "", o.origin, bodystore.Options{})
	half := len(o.body) / 2
	leader := f.started(t, t.Context(), "/cut")
	readN(t, leader.Body, half)
	waiter := f.started(t, t.Context(), "/cut")
	if x := waiter.Header.Get("X-Cache"); x != "MISS; coalesced" {
		t.Fatalf("waiter: X-Cache %q", x)
	}
	readN(t, waiter.Body, half)
	close(o.release)
	for name, resp := range map[string]*http.Response{"leader": leader, "waiter": waiter} {
		if rest, err := io.ReadAll(resp.Body); err == nil {
			t.Fatalf("%s: the response ended cleanly after %d more bytes", name, len(rest))
		}
	}
	waitFor(t, func() bool { b, tmp := f.files(); return len(b) == 0 && len(tmp) == 0 }, "the temp file to be removed")
	if e := f.stored("/cut"); e != nil {
		t.Fatal("a broken-off body was stored")
	}
}

func TestAClientThatLeavesDoesNotStopAFileFill(t *testing.T) {
	o := newHeldOrigin(t, 8<<20, false)
	f := newFileFixture(t, "", o.origin, bodystore.Options{})
	ctx, cancel := context.WithCancel(t.Context())
	leader := f.started(t, ctx, "/leave")
	readN(t, leader.Body, 64<<10)
	cancel()
	leader.Body.Close()
	close(o.release)
	e := f.waitStored(t, "/leave")
	if e.File == nil || e.File.Size != int64(len(o.body)) {
		t.Fatalf("stored %+v", e.File)
	}
	expectBody(t, f.get("/leave"), 200, "HIT; layer=l1", o.body)
}

func TestABodyOfUnknownLengthSpillsIntoAFilePastTheThreshold(t *testing.T) {
	big, small := payload(3, 300<<10), payload(4, 10<<10)
	f := newFileFixture(t, "", newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=300")
		b := small
		if r.URL.Path == "/big" {
			b = big
		}
		for i := 0; i < len(b); i += 16 << 10 { // no Content-Length: chunked
			_, _ = w.Write(b[i:min(i+16<<10, len(b))])
			http.NewResponseController(w).Flush()
		}
	}), bodystore.Options{})
	expectBody(t, f.get("/big"), 200, "MISS", big)
	if e := f.waitStored(t, "/big"); e.File == nil || e.File.Size != int64(len(big)) {
		t.Fatalf("/big stored with file %+v, want a %d-byte file", e.File, len(big))
	}
	expectBody(t, f.get("/big"), 200, "HIT; layer=l1", big)
	expectBody(t, f.get("/small"), 200, "MISS", small)
	if e := f.waitStored(t, "/small"); e.File != nil || !bytes.Equal(e.Body, small) {
		t.Fatalf("/small stored with file %+v and %d inline bytes, want inline", e.File, len(e.Body))
	}
	if b, _ := f.files(); len(b) != 1 {
		t.Fatalf("%d body files, want 1", len(b))
	}
}

func TestAFileWriteErrorMidFillStillServesTheWholeBody(t *testing.T) {
	// Files this process writes may not grow past 1 MiB: the body file's
	// writes fail with EFBIG midway, as they would on a full disk.
	body := payload(5, 3<<20)
	f := newFileFixture(t, "", newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=300")
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		_, _ = w.Write(body)
	}), bodystore.Options{})
	restore := limitFileSize(t, 1<<20)
	r := f.get("/disk")
	restore()
	expectBody(t, r, 200, "MISS", body)
	waitFor(t, func() bool { b, tmp := f.files(); return len(b) == 0 && len(tmp) == 0 }, "the temp file to be removed")
	if e := f.stored("/disk"); e != nil {
		t.Fatal("a body whose file failed was stored")
	}
	if f.bodyErrors(metrics.BodyOpWrite) < 1 {
		t.Fatal("the write error was not counted")
	}
	// With the disk back, the next request fills as usual.
	expectBody(t, f.get("/disk"), 200, "MISS", body)
	f.waitStored(t, "/disk")
}

func TestReplacingAFileBackedEntryRemovesItsFile(t *testing.T) {
	f := newFileFixture(t, "", newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=60")
		_, _ = w.Write(payload(6, fileSize))
	}), bodystore.Options{})
	f.get("/v")
	old := f.waitStored(t, "/v")
	f.clock.Advance(2 * time.Minute)
	expectBody(t, f.get("/v"), 200, "MISS", payload(6, fileSize))
	waitFor(t, func() bool { e := f.stored("/v"); return e != nil && e.File.ID != old.File.ID }, "the new entry")
	b, _ := f.files()
	if len(b) != 1 || filepath.Base(b[0]) != fmt.Sprintf("%x.body", f.stored("/v").File.ID) {
		t.Fatalf("body files %q, want only the new entry's", b)
	}
}

func TestAFileFillOvertakenByAnInvalidationLeavesNoFile(t *testing.T) {
	o := newHeldOrigin(t, 512<<10, false)
	f := newFileFixture(t, "", o.origin, bodystore.Options{})
	leader := f.started(t, t.Context(), "/inval")
	readN(t, leader.Body, len(o.body)/2)
	expect(t, f.do(http.MethodPost, "/inval"), 200, "BYPASS")
	close(o.release)
	if rest, err := io.ReadAll(leader.Body); err != nil || len(rest) != len(o.body)-len(o.body)/2 {
		t.Fatalf("the leader got %d more bytes (err %v)", len(rest), err)
	}
	waitFor(t, func() bool { b, tmp := f.files(); return len(b) == 0 && len(tmp) == 0 }, "the overtaken fill's file to go")
	if e := f.stored("/inval"); e != nil {
		t.Fatal("an overtaken fill was stored")
	}
}

// bodyStore opens a body store in a fresh directory for a proxy.
func bodyStore(t testing.TB) *bodystore.Store {
	t.Helper()
	m, err := metrics.New(prometheus.NewRegistry(), nil)
	if err != nil {
		t.Fatal(err)
	}
	s, _, err := bodystore.Open(t.Context(), bodystore.Options{Dir: t.TempDir(), MaxBytes: 1 << 30, Metrics: m, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func TestAFileFillAboveTheL2CapGivesTheTierWideLeaseBackAtOnce(t *testing.T) {
	// A body file above l2.maxBodySize stays with the replica that
	// fetched it, so the other replicas must not wait for it: they fetch
	// for themselves at once.
	redis := testredis.Start(t)
	o := newHeldOrigin(t, 512<<10, false)
	a := replicaWith(t, redis.Addr(), o.origin, withL2MaxBody(t, redis.Addr(), 256<<10, bodyStore(t)))
	b := replicaWith(t, redis.Addr(), o.origin, withL2MaxBody(t, redis.Addr(), 256<<10, bodyStore(t)))
	get := func(f *fixture) <-chan response {
		c := make(chan response, 1)
		go func() {
			req, _ := http.NewRequest(http.MethodGet, f.srv.URL+"/lease", nil)
			req.Host = "shop"
			resp, err := f.srv.Client().Do(req)
			if err != nil {
				c <- response{status: -1, body: err.Error()}
				return
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			c <- response{resp.StatusCode, resp.Header, string(body)}
		}()
		return c
	}
	fromA := get(a)
	o.holding(t) // A's fill is writing its file and holds the origin
	fromB := get(b)
	waitFor(t, func() bool { return o.count() == 2 }, "B to fetch while A's fill runs")
	close(o.release)
	for name, c := range map[string]<-chan response{"A": fromA, "B": fromB} {
		r := await(t, c)
		if r.status != 200 || r.xcache() != "MISS" || r.body != string(o.body) {
			t.Fatalf("%s: %d %q with %d bytes", name, r.status, r.xcache(), len(r.body))
		}
	}
	// Neither wrote the body or its entry to L2.
	_ = a.px.Close(context.Background()) // waits for L2 writes of its own
	_ = b.px.Close(context.Background())
	if c, e := chunksAndEntries(t, rawRedis(t, redis.Addr())); c != 0 || e != 0 {
		t.Fatalf("Redis holds %d chunks and %d entries of a body above the cap", c, e)
	}
}

func TestWaitersOfABackgroundRefreshStreamFromItsFile(t *testing.T) {
	o := newHeldOrigin(t, 512<<10, false)
	o.cc, o.holdFrom = "max-age=10, stale-while-revalidate=10", 2
	f := newFileFixture(t, "", o.origin, bodystore.Options{})
	expectBody(t, f.get("/swr"), 200, "MISS", o.body)
	f.waitStored(t, "/swr")
	f.clock.Advance(15 * time.Second)
	// Stale within stale-while-revalidate: served at once, and refreshed
	// in the background (the origin holds the refresh).
	expectBody(t, f.get("/swr"), 200, "STALE; layer=l1", o.body)
	o.holding(t)
	// Past stale-while-revalidate the entry is of no use: this request
	// waits on the refresh's flight and streams from its file.
	f.clock.Advance(10 * time.Second)
	waiter := f.started(t, t.Context(), "/swr")
	if x := waiter.Header.Get("X-Cache"); x != "MISS; coalesced" {
		t.Fatalf("waiter: X-Cache %q", x)
	}
	half := len(o.body) / 2
	if !bytes.Equal(readN(t, waiter.Body, half), o.body[:half]) {
		t.Fatal("the waiter's first half differs")
	}
	close(o.release)
	if rest, err := io.ReadAll(waiter.Body); err != nil || !bytes.Equal(rest, o.body[half:]) {
		t.Fatalf("waiter: second half of %d bytes (err %v)", len(rest), err)
	}
	if n := f.origin.count(); n != 2 {
		t.Fatalf("the origin saw %d requests, want 2", n)
	}
}

func TestTheTiersThresholdDecidesWhatGoesToAFile(t *testing.T) {
	f := newFileFixture(t, "bodyStore: {threshold: 512Ki}", newOrigin(t, bodies(fileSize)), bodystore.Options{})
	expectBody(t, f.get("/mid"), 200, "MISS", bodyFor("/mid", fileSize))
	if e := f.waitStored(t, "/mid"); e.File != nil || len(e.Body) != fileSize {
		t.Fatalf("a %d-byte body under a 512Ki threshold: file %+v, %d inline bytes", fileSize, e.File, len(e.Body))
	}
	expectBody(t, f.get("/mid"), 200, "HIT; layer=l1", bodyFor("/mid", fileSize))
}

func TestAWaiterForAnotherVariantFetchesForItself(t *testing.T) {
	o := newHeldOrigin(t, 512<<10, false)
	o.vary = "Accept-Language"
	f := newFileFixture(t, "", o.origin, bodystore.Options{})
	get := func(lang string) *http.Response {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, f.srv.URL+"/lang", nil)
		req.Header.Set("Accept-Language", lang)
		resp, err := f.srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		return resp
	}
	en := get("en")
	o.holding(t)
	fr := make(chan *http.Response, 1)
	go func() { fr <- get("fr") }()
	// The fr request waits on the en fill, sees its variant differs and
	// fetches for itself (the origin holds both).
	select {
	case <-o.firstHalf:
	case <-time.After(5 * time.Second):
		close(o.release)
		t.Fatal("the fr request did not fetch for itself")
	}
	close(o.release)
	var frResp *http.Response
	select {
	case frResp = <-fr:
	case <-time.After(5 * time.Second):
		t.Fatal("no answer to fr within 5s")
	}
	for name, resp := range map[string]*http.Response{"en": en, "fr": frResp} {
		if x := resp.Header.Get("X-Cache"); x != "MISS" {
			t.Fatalf("%s: X-Cache %q, want its own fetch", name, x)
		}
		if b, err := io.ReadAll(resp.Body); err != nil || !bytes.Equal(b, o.body) {
			t.Fatalf("%s: %d bytes (err %v)", name, len(b), err)
		}
	}
	if n := o.count(); n != 2 {
		t.Fatalf("the origin saw %d requests, want 2", n)
	}
}

func TestARevalidatedFileBackedEntryKeepsAndServesItsFile(t *testing.T) {
	body := payload(8, fileSize)
	f := newFileFixture(t, "", newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=60")
		w.Header().Set("ETag", `"v1"`)
		if r.Header.Get("If-None-Match") == `"v1"` {
			w.WriteHeader(http.StatusNotModified)
			return
		}
		_, _ = w.Write(body)
	}), bodystore.Options{})
	f.get("/reval")
	before := f.waitStored(t, "/reval")
	f.clock.Advance(2 * time.Minute)
	expectBody(t, f.get("/reval"), 200, "REVALIDATED", body)
	waitFor(t, func() bool { e := f.stored("/reval"); return e != nil && e.ResponseTime.After(before.ResponseTime) }, "the revalidated entry")
	if e := f.stored("/reval"); e.File == nil || e.File.ID != before.File.ID {
		t.Fatalf("the revalidated entry's file %+v, want the same %x", e.File, before.File.ID)
	}
	expectBody(t, f.get("/reval"), 200, "HIT; layer=l1", body)
	if b, _ := f.files(); len(b) != 1 || f.origin.count() != 2 {
		t.Fatalf("%d body files and %d origin requests, want 1 and 2", len(b), f.origin.count())
	}
}

// limitFileSize lowers this process's RLIMIT_FSIZE to n, so that writes
// past n bytes into any file fail with EFBIG (Go ignores SIGXFSZ), as they
// would on a full disk. restore puts the old limit back; it may be called
// more than once, and runs at the test's end in any case.
func limitFileSize(t *testing.T, n uint64) (restore func()) {
	t.Helper()
	var old syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_FSIZE, &old); err != nil {
		t.Skip("no RLIMIT_FSIZE:", err)
	}
	if err := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &syscall.Rlimit{Cur: n, Max: old.Max}); err != nil {
		t.Skip("cannot lower RLIMIT_FSIZE:", err)
	}
	var once sync.Once
	restore = func() { once.Do(func() { _ = syscall.Setrlimit(syscall.RLIMIT_FSIZE, &old) }) }
	t.Cleanup(restore)
	return restore
}
