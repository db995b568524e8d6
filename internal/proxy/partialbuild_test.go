package proxy

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tiercache/tiercache/internal/bodystore"
	"github.com/tiercache/tiercache/internal/entry"
	"github.com/tiercache/tiercache/internal/invalidate"
	"github.com/tiercache/tiercache/internal/store"
)

// Building a complete response from stored pieces (ranges) of a large
// representation: one build per key, never across representations or
// purges, and never holding a reservation for a client that stalls.

// A client that sends one tiny no-cache range after another, while the
// complete response of pieces covering a large representation is being
// built, must not start a full copy per request: each copy reserves the
// whole representation in the body store (evicting other tenants'
// bodies) and all but the last are thrown away.
func TestOneBuildOfACompleteResponseFromPiecesRunsPerKey(t *testing.T) {
	want, o := largeRep(t, "/amp")
	f := newFileFixture(t, "", o, bodystore.Options{})
	gate := make(chan struct{})
	var released sync.Once
	release := func() { released.Do(func() { close(gate) }) }
	t.Cleanup(release)
	var builds atomic.Int32
	f.px.beforeBuild = func(string) {
		builds.Add(1)
		<-gate
	}

	f.get("/amp", "Range", rangeOf(0, 99999))
	expectBody(t, f.get("/amp"), 200, "MISS; partial", want)
	waitFor(t, func() bool { return builds.Load() == 1 }, "the first build to start")

	const parts = 8
	for i := range parts {
		a := 1000 + i*10
		expectBody(t, f.get("/amp", "Range", rangeOf(a, a+9), "Cache-Control", "no-cache"), 206, "MISS", want[a:a+10])
	}
	release()
	f.px.bg.Wait()
	if n := builds.Load(); n > 2 {
		t.Fatalf("%d builds of the complete response for one key, want at most 2 (the first and one for the parts stored meanwhile)", n)
	}
	e := f.waitStored(t, "/amp")
	if e.Kind != entry.KindResponse || e.File == nil || e.File.Size != fileSize {
		t.Fatalf("stored %+v, want the complete response in one file", e)
	}
	expectBody(t, f.get("/amp"), 200, "HIT; layer=l1", want)
	if b, tmp := f.files(); len(b) != 1 || len(tmp) != 0 {
		t.Fatalf("%d body files and %d temp files, want only the complete one", len(b), len(tmp))
	}
}

// A soft purge that lands after the part completing the pieces was
// stored, but before the build of the complete response began, must not
// be undone by that build storing the complete response fresh.
func TestASoftPurgeBeforeTheBuildFromPiecesStartsIsNotUndone(t *testing.T) {
	want, o := largeRep(t, "/sp")
	var purger *invalidate.Purger
	f := newFileFixture(t, "", o, bodystore.Options{}, func(po *Options) {
		purger = invalidate.NewPurger(store.NewLocal(po.Store.(testStore).c, po.Bodies), po.Config)
		po.Invalidator = purger
	})
	var purged atomic.Bool
	f.px.beforeBuild = func(string) {
		if purged.CompareAndSwap(false, true) {
			if _, err := purger.Purge(context.Background(), invalidate.Request{URLs: []string{"/sp"}, Soft: true}); err != nil {
				t.Errorf("soft purge: %v", err)
			}
		}
	}
	f.get("/sp", "Range", rangeOf(0, 99999))
	expectBody(t, f.get("/sp"), 200, "MISS; partial", want)
	f.px.bg.Wait()
	if !purged.Load() {
		t.Fatal("no build started")
	}
	// The purge was made at the wall clock's time, after the fixture's.
	o.clock.Advance(time.Second)
	before := f.origin.count()
	r := f.get("/sp")
	if x := r.header.Get("X-Cache"); x == "HIT; layer=l1" {
		t.Fatalf("after a soft purge the response is a fresh hit (X-Cache %q): the build undid the purge", x)
	}
	if f.origin.count() == before {
		t.Fatal("after a soft purge the origin was not asked")
	}
}

// A misbehaving origin that changes the representation (a new ETag)
// between parts: the newer part, forwarded as the client asked it, is
// kept alone, never combined with pieces of the old representation, so
// no client is served a mix of the two.
func TestAPieceOfAnotherRepresentationIsNeverCombinedWithStoredPieces(t *testing.T) {
	v1, v2 := bodyFor("/chg1", fileSize), bodyFor("/chg2", fileSize)
	if bytes.Equal(v1[:5000], v2[:5000]) {
		t.Fatal("the two representations must differ")
	}
	var second atomic.Bool
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		body, etag := v1, `"v1"`
		if second.Load() {
			body, etag = v2, `"v2"`
		}
		w.Header().Set("Cache-Control", "max-age=3600")
		w.Header().Set("ETag", etag)
		w.Header().Set("Content-Type", "application/octet-stream")
		http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(body))
	})
	f := newFileFixture(t, "", o, bodystore.Options{})
	f.get("/chg", "Range", rangeOf(0, 9999))
	f.get("/chg", "Range", rangeOf(20000, 29999))
	second.Store(true)
	// Two runs missing: the client's range is forwarded as it is.
	expectBody(t, f.get("/chg", "Range", rangeOf(5000, 39999)), 206, "MISS", v2[5000:40000])
	asked(t, f.origin, rangeOf(5000, 39999), "")
	if got := pieceSpans(t, f.part("/chg")); !slices.Equal(got, []entry.Span{sp(5000, 39999)}) {
		t.Fatalf("stored pieces %v, want the new representation's part alone", got)
	}
	expectBody(t, f.get("/chg", "Range", rangeOf(0, 39999)), 206, "MISS; partial", v2[:40000])
	if b, _ := f.files(); len(b) != 2 {
		t.Fatalf("%d body files, want the new representation's two pieces (the old ones' files gone)", len(b))
	}
}

// A misbehaving origin answering a GET without Range with a 206: nothing
// is stored, neither as a complete response nor as a piece, and the next
// request goes to the origin again.
func TestA206ToARequestWithoutRangeIsNeverStored(t *testing.T) {
	want := bodyFor("/unasked", fileSize)
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=3600")
		w.Header().Set("ETag", `"v1"`)
		w.Header().Set("Content-Range", contentRange(0, 99999))
		w.Header().Set("Content-Length", "100000")
		w.WriteHeader(http.StatusPartialContent)
		_, _ = w.Write(want[:100000])
	})
	f := newFileFixture(t, "", o, bodystore.Options{})
	expectBody(t, f.get("/unasked"), 206, "MISS", want[:100000])
	f.px.bg.Wait()
	if e := f.stored("/unasked"); e != nil {
		t.Fatalf("a 206 to a request without Range was stored as %+v", e)
	}
	if p := f.part("/unasked"); p != nil {
		t.Fatalf("a 206 to a request without Range was stored as a part: %+v", p.Partial)
	}
	if b, tmp := f.files(); len(b) != 0 || len(tmp) != 0 {
		t.Fatalf("%d body files and %d temp files left", len(b), len(tmp))
	}
	expectBody(t, f.get("/unasked"), 206, "MISS", want[:100000])
	expectOriginCount(t, f.origin, 2)
}

// A client that asks for a large range and then stops reading holds the
// fill of its part (parts are written at the client's pace): the piece's
// reservation in the body store, which evicts other bodies to make room
// and refuses fills once the budget is reserved, must not outlive the
// fill's store bound (origin.timeout) however long the client stalls.
func TestAClientThatStopsReadingHoldsNoPieceReservationPastTheStoreBound(t *testing.T) {
	const size = 64 << 20
	rep := bytes.Repeat([]byte("0123456789abcdef"), size/16)
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=3600")
		w.Header().Set("ETag", `"v1"`)
		w.Header().Set("Content-Type", "application/octet-stream")
		http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(rep))
	})
	f := newFileFixture(t, "origin: {timeout: 300ms}", o, bodystore.Options{})
	conn, err := net.Dial("tcp", f.srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetReadBuffer(4 << 10)
	}
	if _, err := io.WriteString(conn, "GET /stall HTTP/1.1\r\nHost: stall.example\r\nRange: bytes=0-"+strconv.Itoa(size/2-1)+"\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	head := make([]byte, 12)
	if _, err := io.ReadFull(conn, head); err != nil || string(head) != "HTTP/1.1 206" {
		t.Fatalf("status line %q, %v", head, err)
	}
	// The client reads nothing more.
	waitFor(t, func() bool { _, _, reserved := f.bodies.Usage(); return reserved > 0 }, "the piece's reservation")
	waitFor(t, func() bool { _, _, reserved := f.bodies.Usage(); return reserved == 0 }, "the reservation to end after origin.timeout")
	if _, tmp := f.files(); len(tmp) != 0 {
		t.Fatalf("%d temp files left while the client stalls", len(tmp))
	}
}
