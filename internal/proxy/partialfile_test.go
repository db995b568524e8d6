package proxy

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tiercache/tiercache/internal/bodystore"
	"github.com/tiercache/tiercache/internal/entry"
	"github.com/tiercache/tiercache/internal/invalidate"
	"github.com/tiercache/tiercache/internal/store"
)

// largeRep is a representation above the default body-store threshold
// (64Ki), served with ranges by http.ServeContent.
func largeRep(t *testing.T, path string) ([]byte, *origin) {
	want := bodyFor(path, fileSize)
	return want, newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=3600")
		w.Header().Set("ETag", `"v1"`)
		w.Header().Set("Content-Type", "application/octet-stream")
		http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(want))
	})
}

// part returns the partial response stored for GET path, or nil.
func (f *fileFixture) part(path string) *entry.Entry {
	req := httptest.NewRequest(http.MethodGet, f.srv.URL+path, nil)
	kb := f.px.keys.Get().(*keyBuf)
	defer f.px.keys.Put(kb)
	kb.build(req, f.px.cfg.Load().Match(req.Host, req.URL.Path, req.Header))
	got := f.px.lookup(context.Background(), kb, req)
	if got.part == nil {
		return nil
	}
	return detach(got.part)
}

// pieceSpans returns the spans of e's pieces, and checks that e holds
// no byte inline.
func pieceSpans(t *testing.T, e *entry.Entry) []entry.Span {
	t.Helper()
	if e == nil || e.Partial == nil {
		t.Fatal("no partial response is stored")
	}
	if len(e.Body) != 0 || len(e.Partial.Spans) != 0 {
		t.Fatalf("the partial response holds %d bytes inline (spans %v)", len(e.Body), e.Partial.Spans)
	}
	var out []entry.Span
	for _, pc := range e.Partial.Pieces {
		out = append(out, pc.Span)
	}
	return out
}

func sp(a, b int) entry.Span { return entry.Span{Start: int64(a), End: int64(b)} }

func rangeOf(a, b int) string { return "bytes=" + strconv.Itoa(a) + "-" + strconv.Itoa(b) }

func contentRange(a, b int) string {
	return "bytes " + strconv.Itoa(a) + "-" + strconv.Itoa(b) + "/" + strconv.Itoa(fileSize)
}

// A part of a large representation is stored in a piece file, not in L1:
// the entry holds no byte of it. A range it covers is then served from
// the file with sendfile, without asking the origin; HEAD needs no file.
func TestALargePartIsStoredAsAPieceFileAndServedWithSendfile(t *testing.T) {
	want, o := largeRep(t, "/vid")
	f := newFileFixture(t, "", o, bodystore.Options{})

	r := f.get("/vid", "Range", rangeOf(1000, 100999))
	expectBody(t, r, 206, "MISS", want[1000:101000])
	asked(t, f.origin, rangeOf(1000, 100999), "")
	if got := pieceSpans(t, f.part("/vid")); !slices.Equal(got, []entry.Span{sp(1000, 100999)}) {
		t.Fatalf("stored pieces %v", got)
	}
	if b, tmp := f.files(); len(b) != 1 || len(tmp) != 0 {
		t.Fatalf("%d body files and %d temp files, want one piece", len(b), len(tmp))
	}
	f.rec.take()

	r = f.get("/vid", "Range", rangeOf(2000, 50999))
	expectBody(t, r, 206, "HIT; layer=l1", want[2000:51000])
	if cr := r.header.Get("Content-Range"); cr != contentRange(2000, 50999) {
		t.Fatalf("Content-Range %q", cr)
	}
	if got := f.rec.take(); !slices.Equal(got, []string{"*bodystore.Section"}) {
		t.Fatalf("the connection's ReadFrom saw %q, want the piece file once", got)
	}
	r = f.do("HEAD", "/vid")
	expect(t, r, 200, "HIT; layer=l1")
	if cl := r.header.Get("Content-Length"); cl != strconv.Itoa(fileSize) {
		t.Fatalf("HEAD Content-Length %q", cl)
	}
	expectOriginCount(t, f.origin, 1)
}

// The one run of bytes the pieces lack is asked with If-Range, and the
// client gets the stored pieces around the origin's new part; the new
// part is a piece too, and a range across three pieces is then their
// files in order.
func TestAGapBetweenPiecesIsAskedExactlyAndCombined(t *testing.T) {
	want, o := largeRep(t, "/gap")
	f := newFileFixture(t, "", o, bodystore.Options{})
	f.get("/gap", "Range", rangeOf(0, 9999))
	f.get("/gap", "Range", rangeOf(50000, 99999))

	r := f.get("/gap", "Range", rangeOf(5000, 60000))
	expectBody(t, r, 206, "MISS; partial", want[5000:60001])
	asked(t, f.origin, rangeOf(10000, 49999), `"v1"`)
	if cr := r.header.Get("Content-Range"); cr != contentRange(5000, 60000) {
		t.Fatalf("Content-Range %q", cr)
	}
	if got := pieceSpans(t, f.part("/gap")); !slices.Equal(got, []entry.Span{sp(0, 9999), sp(10000, 49999), sp(50000, 99999)}) {
		t.Fatalf("stored pieces %v", got)
	}
	f.rec.take()
	r = f.get("/gap", "Range", rangeOf(9000, 50999))
	expectBody(t, r, 206, "HIT; layer=l1", want[9000:51000])
	if got := f.rec.take(); len(got) != 3 || got[0] != "*bodystore.Section" {
		t.Fatalf("the connection's ReadFrom saw %q, want the three piece files", got)
	}
	expectOriginCount(t, f.origin, 3)
}

// A newer part overlapping older pieces wins where they overlap: the
// older ones are trimmed (one inside it split in two around it), and a
// piece left with nothing goes with its file.
func TestANewerPartTrimsTheOlderPieces(t *testing.T) {
	want, o := largeRep(t, "/trim")
	f := newFileFixture(t, "", o, bodystore.Options{})
	f.get("/trim", "Range", rangeOf(0, 99999))
	f.get("/trim", "Range", rangeOf(150000, 159999))
	expectBody(t, f.get("/trim", "Range", rangeOf(140000, 169999)), 206, "MISS", want[140000:170000])
	// A range the pieces cover is a hit: a newer part inside a piece
	// comes from a client that accepts no stored content.
	expectBody(t, f.get("/trim", "Range", rangeOf(1000, 1999), "Cache-Control", "no-cache"), 206, "MISS", want[1000:2000])
	got := pieceSpans(t, f.part("/trim"))
	if !slices.Equal(got, []entry.Span{sp(0, 999), sp(1000, 1999), sp(2000, 99999), sp(140000, 169999)}) {
		t.Fatalf("stored pieces %v", got)
	}
	if b, _ := f.files(); len(b) != 3 {
		t.Fatalf("%d body files, want 3 (the split piece shares its file; the covered one is gone)", len(b))
	}
	expectBody(t, f.get("/trim", "Range", rangeOf(500, 150500)), 206, "MISS; partial", want[500:150501])
	expectBody(t, f.get("/trim", "Range", rangeOf(500, 2500)), 206, "HIT; layer=l1", want[500:2501])
}

// Once the pieces cover the representation, one complete body file is
// built from them and stored as a complete response in their place: a
// full GET and any range are then hits from that one file, and the piece
// files are gone.
func TestPiecesCoveringTheRepresentationBecomeOneCompleteFile(t *testing.T) {
	want, o := largeRep(t, "/all")
	f := newFileFixture(t, "", o, bodystore.Options{})
	f.get("/all", "Range", rangeOf(0, 99999))
	r := f.get("/all")
	expectBody(t, r, 200, "MISS; partial", want)
	asked(t, f.origin, "bytes=100000-", `"v1"`)

	e := f.waitStored(t, "/all")
	if e.File == nil || e.File.Size != fileSize || e.Kind != entry.KindResponse {
		t.Fatalf("stored %+v, want a complete response in a %d-byte file", e.File, fileSize)
	}
	waitFor(t, func() bool { b, tmp := f.files(); return len(b) == 1 && len(tmp) == 0 }, "the piece files to go")
	f.rec.take()
	expectBody(t, f.get("/all"), 200, "HIT; layer=l1", want)
	expectBody(t, f.get("/all", "Range", rangeOf(99000, 100999)), 206, "HIT; layer=l1", want[99000:101000])
	if got := f.rec.take(); !slices.Equal(got, []string{"*bodystore.Section", "*bodystore.Section"}) {
		t.Fatalf("the connection's ReadFrom saw %q, want the complete file twice", got)
	}
	expectOriginCount(t, f.origin, 2)
}

// An entry holds at most entry.MaxPieces pieces: the part that would
// make one more replaces them alone, and their files go.
func TestThePieceLimit(t *testing.T) {
	want, o := largeRep(t, "/many")
	f := newFileFixture(t, "", o, bodystore.Options{})
	for i := range entry.MaxPieces {
		f.get("/many", "Range", rangeOf(i*1000, i*1000+99))
	}
	if got := pieceSpans(t, f.part("/many")); len(got) != entry.MaxPieces {
		t.Fatalf("%d pieces stored, want %d", len(got), entry.MaxPieces)
	}
	expect(t, f.get("/many", "Range", rangeOf(0, 99)), 206, "HIT; layer=l1")
	last := entry.MaxPieces * 1000
	expectBody(t, f.get("/many", "Range", rangeOf(last, last+99)), 206, "MISS; partial", want[last:last+100])
	asked(t, f.origin, rangeOf(last, last+99), `"v1"`)
	if got := pieceSpans(t, f.part("/many")); !slices.Equal(got, []entry.Span{sp(last, last+99)}) {
		t.Fatalf("stored pieces %v, want the newest alone", got)
	}
	if b, _ := f.files(); len(b) != 1 {
		t.Fatalf("%d body files, want the newest piece's alone", len(b))
	}
	expect(t, f.get("/many", "Range", rangeOf(0, 99)), 206, "MISS; partial")
	asked(t, f.origin, rangeOf(0, 99), `"v1"`)
}

// A part whose body is not the bytes its Content-Range names (shorter or
// longer, chunked so that framing cannot tell) is not stored: no piece
// file stays, and the client gets what the origin sent as it framed it.
func TestALyingPartStoresNoPiece(t *testing.T) {
	for _, tt := range []struct {
		name string
		sent int
	}{
		{"a body short of its Content-Range", 500},
		{"a body longer than its Content-Range", 1500},
	} {
		t.Run(tt.name, func(t *testing.T) {
			payload := bytes.Repeat([]byte("x"), tt.sent)
			f := newFileFixture(t, "", newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Cache-Control", "max-age=3600")
				w.Header().Set("Content-Range", contentRange(0, 999))
				w.WriteHeader(http.StatusPartialContent)
				_, _ = w.Write(payload[:1])
				w.(http.Flusher).Flush() // chunked: no Content-Length
				_, _ = w.Write(payload[1:])
			}), bodystore.Options{})
			r := f.get("/lie", "Range", rangeOf(0, 999))
			if r.status != 206 || r.body != string(payload) || r.header.Get("Content-Length") != "" {
				t.Fatalf("got %d with %d bytes (Content-Length %q), want the origin's %d bytes as framed",
					r.status, len(r.body), r.header.Get("Content-Length"), tt.sent)
			}
			if e := f.part("/lie"); e != nil {
				t.Fatalf("stored %+v", e.Partial)
			}
			waitFor(t, func() bool { b, tmp := f.files(); return len(b) == 0 && len(tmp) == 0 }, "no piece file to be left")
			expect(t, f.get("/lie", "Range", rangeOf(0, 999)), 206, "MISS")
		})
	}
}

// A piece file removed under the store makes the request a miss as if
// nothing were stored: the client gets the right bytes from the origin,
// never a short response, whether the piece was to serve a range it
// covers or the bytes around a gap. HEAD, which needs no file, is still a
// hit.
func TestAPieceRemovedUnderTheStoreIsAMiss(t *testing.T) {
	want, o := largeRep(t, "/rm")
	f := newFileFixture(t, "", o, bodystore.Options{})
	removePiece := func(path string, i int) {
		t.Helper()
		e := f.part(path)
		if err := os.Remove(filepath.Join(f.dir, entryFileName(e.Partial.Pieces[i].File.ID))); err != nil {
			t.Fatal(err)
		}
	}

	f.get("/rm", "Range", rangeOf(0, 9999))
	f.get("/rm", "Range", rangeOf(20000, 29999))
	removePiece("/rm", 1)
	expect(t, f.do("HEAD", "/rm"), 200, "HIT; layer=l1")
	r := f.get("/rm", "Range", rangeOf(21000, 22000))
	expectBody(t, r, 206, "MISS", want[21000:22001])
	asked(t, f.origin, rangeOf(21000, 22000), "")
	expectBody(t, f.get("/rm", "Range", rangeOf(21500, 21600)), 206, "HIT; layer=l1", want[21500:21601])
	expectOriginCount(t, f.origin, 3)

	f.get("/rm2", "Range", rangeOf(0, 9999))
	f.get("/rm2", "Range", rangeOf(20000, 29999))
	removePiece("/rm2", 0)
	r = f.get("/rm2", "Range", rangeOf(5000, 25000))
	expectBody(t, r, 206, "MISS", want[5000:25001])
	asked(t, f.origin, rangeOf(5000, 25000), "")
}

func entryFileName(id [16]byte) string { return strings.ToLower(strconvHex(id[:])) + ".body" }

func strconvHex(b []byte) string {
	const digits = "0123456789abcdef"
	out := make([]byte, 0, 2*len(b))
	for _, c := range b {
		out = append(out, digits[c>>4], digits[c&15])
	}
	return string(out)
}

// A purge of the URL removes its pieces' files with the partial response,
// counted once.
func TestAPurgeRemovesThePieceFiles(t *testing.T) {
	_, o := largeRep(t, "/pg")
	var purger *invalidate.Purger
	f := newFileFixture(t, "", o, bodystore.Options{}, func(po *Options) {
		purger = invalidate.NewPurger(store.NewLocal(po.Store.(testStore).c, po.Bodies), po.Config)
		po.Invalidator = purger
	})
	f.get("/pg", "Range", rangeOf(0, 9999))
	f.get("/pg", "Range", rangeOf(20000, 29999))
	if b, _ := f.files(); len(b) != 2 {
		t.Fatalf("%d body files before the purge, want 2", len(b))
	}
	res, err := purger.Purge(context.Background(), invalidate.Request{URLs: []string{"/pg"}})
	if err != nil || res.Purged != 1 || res.Bodies != 2 {
		t.Fatalf("purge: %+v, %v; want 1 purged with 2 files", res, err)
	}
	if b, _ := f.files(); len(b) != 0 {
		t.Fatalf("%d body files after the purge: %q", len(b), b)
	}
	expect(t, f.get("/pg", "Range", rangeOf(0, 99)), 206, "MISS")
}

// A restart of the body store removes piece files: their partial
// responses lived in L1 only, and a piece must never come back as the
// complete response of its key.
func TestARestartRemovesThePieceFiles(t *testing.T) {
	_, o := largeRep(t, "/rs")
	f := newFileFixture(t, "", o, bodystore.Options{})
	f.get("/rs", "Range", rangeOf(0, 9999))
	if b, _ := f.files(); len(b) != 1 {
		t.Fatalf("%d body files, want the piece", len(b))
	}
	again, rec, err := bodystore.Open(t.Context(), bodystore.Options{Dir: f.dir, MaxBytes: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	if len(rec) != 0 {
		t.Fatalf("the restart recovered %d bodies from a piece file", len(rec))
	}
	if b, _ := filepath.Glob(filepath.Join(f.dir, "*.body")); len(b) != 0 {
		t.Fatalf("a piece file survived the restart: %q", b)
	}
}

// Answers served on a miss through the partial paths carry the corrected
// Age a full miss carries (RFC 9111 §4.2.3): the origin's Age plus the
// time the origin took.
func TestPartialMissesCarryTheCorrectedAge(t *testing.T) {
	rp := newRep("0123456789", `"v1"`, "max-age=3600")
	var o *origin
	o = newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Age", "30")
		o.clock.Advance(2 * time.Second)
		rp.serve(w, r)
	})
	f := newFixtureFor(t, "", o)
	r := f.get("/age", "Range", "bytes=0-4")
	expect(t, r, 206, "MISS")
	if got := r.header.Values("Age"); !slices.Equal(got, []string{"32"}) {
		t.Fatalf("forwarded part: Age %q, want 32", got)
	}
	r = f.get("/age")
	expect(t, r, 200, "MISS; partial")
	expectBytes(t, r, "0123456789", "")
	if got := r.header.Values("Age"); !slices.Equal(got, []string{"32"}) {
		t.Fatalf("combined response: Age %q, want 32", got)
	}
}

// Concurrent full GETs of a representation kept in pieces, with one run
// missing, each ask the origin for that run at once and get the whole
// representation, never a whole fetch. They are not collapsed onto one
// fill: its complete response is built after it and could not be handed
// to them, so a waiter would only ask for the run itself once the leader
// was done.
func TestConcurrentFullGetsOfPiecesAskOnlyForTheMissingRun(t *testing.T) {
	want := bodyFor("/herd", fileSize)
	var armed atomic.Bool
	gate := make(chan struct{})
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		if armed.Load() {
			<-gate
		}
		w.Header().Set("Cache-Control", "max-age=3600")
		w.Header().Set("ETag", `"v1"`)
		http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(want))
	})
	f := newFileFixture(t, "", o, bodystore.Options{})
	f.get("/herd", "Range", rangeOf(0, 199999))
	before, coalesced := o.count(), testCounter(f.px.m.Coalesced)

	const clients = 4
	armed.Store(true)
	var released sync.Once
	release := func() { released.Do(func() { close(gate) }) }
	t.Cleanup(release)
	type answer struct {
		status int
		body   []byte
		err    error
	}
	answers := make(chan answer, clients)
	for range clients {
		go func() {
			resp, err := f.srv.Client().Get(f.srv.URL + "/herd")
			if err != nil {
				answers <- answer{err: err}
				return
			}
			defer resp.Body.Close()
			b, err := io.ReadAll(resp.Body)
			answers <- answer{resp.StatusCode, b, err}
		}()
	}
	// Not collapsed: every client's run is at the origin at once, none
	// waiting for a leader whose answer it could not use.
	waitFor(t, func() bool { return o.count()-before == clients }, "every client's request for the run to reach the origin")
	if n := testCounter(f.px.m.Coalesced) - coalesced; n != 0 {
		t.Fatalf("%v requests waited on another's fill", n)
	}
	release()
	for range clients {
		a := <-answers
		if a.err != nil || a.status != http.StatusOK || !bytes.Equal(a.body, want) {
			t.Fatalf("a client got %d, %d bytes, err %v; want 200 and the whole representation", a.status, len(a.body), a.err)
		}
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, r := range o.requests[before:] {
		if g := r.Header.Get("Range"); g != "bytes=200000-" {
			t.Errorf("the origin was asked for Range %q, want only the missing run bytes=200000-", g)
		}
	}
}

// A range across more than maxServedPieces pieces is not sent from their
// files (a descriptor each for the whole response): it is asked of the
// origin as the client sent it, and the answer, stored as one piece,
// replaces them, so the next such range is one file.
func TestARangeAcrossTooManyPiecesIsAskedAsSentAndReplacesThem(t *testing.T) {
	want, o := largeRep(t, "/scattered")
	f := newFileFixture(t, "", o, bodystore.Options{})
	n := maxServedPieces + 1
	for i := range n {
		f.get("/scattered", "Range", rangeOf(i*100, i*100+99))
	}
	if got := pieceSpans(t, f.part("/scattered")); len(got) != n {
		t.Fatalf("%d pieces stored, want %d", len(got), n)
	}
	end := n*100 - 1
	expectBody(t, f.get("/scattered", "Range", rangeOf(0, end)), 206, "MISS", want[:end+1])
	asked(t, f.origin, rangeOf(0, end), "")
	if got := pieceSpans(t, f.part("/scattered")); !slices.Equal(got, []entry.Span{sp(0, end)}) {
		t.Fatalf("stored pieces %v, want the one answer in place of the %d", got, n)
	}
	expectBody(t, f.get("/scattered", "Range", rangeOf(0, end)), 206, "HIT; layer=l1", want[:end+1])
	// A range across exactly maxServedPieces pieces is still sent from them.
	for i := range maxServedPieces {
		f.get("/scattered", "Range", rangeOf(10000+i*100, 10000+i*100+99))
	}
	before := f.origin.count()
	expectBody(t, f.get("/scattered", "Range", rangeOf(10000, 10000+maxServedPieces*100-1)), 206, "HIT; layer=l1",
		want[10000:10000+maxServedPieces*100])
	expectOriginCount(t, f.origin, before)
}
