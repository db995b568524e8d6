package proxy

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tiercache/tiercache/internal/invalidate"
	"github.com/tiercache/tiercache/test/testredis"
)

// representation is an origin's resource that answers ranges as net/http
// does (http.ServeContent: Range, If-Range, Content-Range), with the
// body, ETag and Cache-Control of the moment.
type representation struct {
	mu             sync.Mutex
	body, etag, cc string
}

func (rp *representation) set(body, etag string) {
	rp.mu.Lock()
	rp.body, rp.etag = body, etag
	rp.mu.Unlock()
}

func (rp *representation) serve(w http.ResponseWriter, r *http.Request) {
	rp.mu.Lock()
	body, etag, cc := rp.body, rp.etag, rp.cc
	rp.mu.Unlock()
	if cc != "" {
		w.Header().Set("Cache-Control", cc)
	}
	if etag != "" {
		w.Header().Set("ETag", etag)
	}
	w.Header().Set("Content-Type", "text/plain")
	http.ServeContent(w, r, "", time.Time{}, strings.NewReader(body))
}

func newRep(body, etag, cc string) *representation {
	return &representation{body: body, etag: etag, cc: cc}
}

// asked checks the Range and If-Range of the origin's last request.
func asked(t *testing.T, o *origin, wantRange, wantIfRange string) {
	t.Helper()
	last := o.last()
	if last == nil {
		t.Fatal("the origin was not asked")
	}
	if g := last.Header.Get("Range"); g != wantRange {
		t.Errorf("the origin was asked for Range %q, want %q", g, wantRange)
	}
	if g := last.Header.Get("If-Range"); g != wantIfRange {
		t.Errorf("the origin was sent If-Range %q, want %q", g, wantIfRange)
	}
}

func expectBytes(t *testing.T, r response, body, contentRange string) {
	t.Helper()
	if r.body != body || r.header.Get("Content-Range") != contentRange {
		t.Fatalf("got body %q Content-Range %q, want %q %q", r.body, r.header.Get("Content-Range"), body, contentRange)
	}
	if cl := r.header.Get("Content-Length"); cl != "" && cl != strconv.Itoa(len(body)) {
		t.Fatalf("Content-Length %s for %d bytes", cl, len(body))
	}
}

func expectOriginCount(t *testing.T, o *origin, n int) {
	t.Helper()
	if got := o.count(); got != n {
		t.Fatalf("the origin was asked %d times, want %d", got, n)
	}
}

// A 206 to a single range is stored, and every range it covers is served
// from it: a byte range, an open range, a suffix, a 416 past its complete
// length, a HEAD and a conditional, without asking the origin again.
func TestAPartIsStoredAndServesTheRangesItCovers(t *testing.T) {
	rp := newRep("0123456789", `"v1"`, "max-age=3600")
	f := newFixture(t, "", rp.serve)

	r := f.get("/p", "Range", "bytes=-6")
	expect(t, r, 206, "MISS")
	expectBytes(t, r, "456789", "bytes 4-9/10")
	asked(t, f.origin, "bytes=-6", "")

	for _, tc := range []struct{ rng, body, cr string }{
		{"bytes=6-8", "678", "bytes 6-8/10"},
		{"bytes=6-", "6789", "bytes 6-9/10"},
		{"bytes=-1", "9", "bytes 9-9/10"},
		{"bytes=4-9", "456789", "bytes 4-9/10"},
		{"bytes=-6", "456789", "bytes 4-9/10"},
	} {
		r := f.get("/p", "Range", tc.rng)
		expect(t, r, 206, "HIT; layer=l1")
		expectBytes(t, r, tc.body, tc.cr)
	}
	r = f.get("/p", "Range", "bytes=10-")
	expect(t, r, 416, "HIT; layer=l1")
	if cr := r.header.Get("Content-Range"); cr != "bytes */10" {
		t.Fatalf("416 Content-Range %q", cr)
	}
	r = f.do("HEAD", "/p")
	expect(t, r, 200, "HIT; layer=l1")
	if cl := r.header.Get("Content-Length"); cl != "10" || r.header.Get("ETag") != `"v1"` {
		t.Fatalf("HEAD from the part: Content-Length %q ETag %q", cl, r.header.Get("ETag"))
	}
	expect(t, f.get("/p", "Range", "bytes=6-8", "If-None-Match", `"v1"`), 304, "HIT; layer=l1")
	expectOriginCount(t, f.origin, 1)
}

// A full GET of a representation whose head is stored asks the origin for
// the tail alone, with If-Range and the stored ETag, and gets the whole
// response; the representation is then stored complete.
func TestTheMissingTailIsAskedWithIfRangeAndTheRepresentationCompleted(t *testing.T) {
	rp := newRep("0123456789", `"v1"`, "max-age=3600")
	f := newFixture(t, "", rp.serve)

	expectBytes(t, f.get("/t", "Range", "bytes=0-4"), "01234", "bytes 0-4/10")
	r := f.get("/t")
	expect(t, r, 200, "MISS; partial")
	expectBytes(t, r, "0123456789", "")
	asked(t, f.origin, "bytes=5-", `"v1"`)
	if r.header.Get("ETag") != `"v1"` || r.header.Get("Cache-Control") != "max-age=3600" {
		t.Fatalf("header of the combined response: %v", r.header)
	}

	r = f.get("/t")
	expect(t, r, 200, "HIT; layer=l1")
	expectBytes(t, r, "0123456789", "")
	expectBytes(t, f.get("/t", "Range", "bytes=7-8"), "78", "bytes 7-8/10")
	expectOriginCount(t, f.origin, 2)
}

// suiteOrigin answers as the conformance suite's
// partial-store-partial-complete does: its first answer is bytes 0-4 of
// ten, fresh for an hour, without any validator, whatever was asked; then
// it answers each range it is asked for.
func suiteOrigin(body string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=3600")
		w.Header().Set("Content-Type", "text/plain")
		if r.Header.Get("Range") == "bytes=-5" {
			w.Header().Set("Content-Range", "bytes 0-4/10")
			w.WriteHeader(http.StatusPartialContent)
			_, _ = io.WriteString(w, body[:5])
			return
		}
		http.ServeContent(w, r, "", time.Time{}, strings.NewReader(body))
	}
}

// A part without a validator is completed while it is fresh (the origin
// vouches for its bytes for that long): the full GET asks for the missing
// tail only (suite: partial-store-partial-complete). Once it is stale the
// full GET asks for everything.
func TestAPartWithoutAValidatorIsCompletedWhileFresh(t *testing.T) {
	f := newFixture(t, "", suiteOrigin("0123456789"))
	r := f.get("/s", "Range", "bytes=-5")
	expectBytes(t, r, "01234", "bytes 0-4/10")
	r = f.get("/s")
	expect(t, r, 200, "MISS; partial")
	expectBytes(t, r, "0123456789", "")
	asked(t, f.origin, "bytes=5-", "")

	g := newFixture(t, "", suiteOrigin("0123456789"))
	expectBytes(t, g.get("/s", "Range", "bytes=-5"), "01234", "bytes 0-4/10")
	g.clock.Advance(2 * time.Hour)
	r = g.get("/s")
	expect(t, r, 200, "MISS")
	expectBytes(t, r, "0123456789", "")
	asked(t, g.origin, "", "")
	expectOriginCount(t, g.origin, 2)
}

// Two parts with the same ETag are combined into one entry; a full GET
// then asks for the one gap between them only.
func TestPartsAreCombinedAndOnlyTheGapBetweenThemIsAsked(t *testing.T) {
	rp := newRep("0123456789", `"v1"`, "max-age=3600")
	f := newFixture(t, "", rp.serve)

	expectBytes(t, f.get("/g", "Range", "bytes=0-2"), "012", "bytes 0-2/10")
	r := f.get("/g", "Range", "bytes=7-9")
	expect(t, r, 206, "MISS; partial")
	expectBytes(t, r, "789", "bytes 7-9/10")
	asked(t, f.origin, "bytes=7-", `"v1"`)
	// Both parts are held now.
	expectBytes(t, f.get("/g", "Range", "bytes=1-2"), "12", "bytes 1-2/10")
	expectBytes(t, f.get("/g", "Range", "bytes=8-9"), "89", "bytes 8-9/10")
	expectOriginCount(t, f.origin, 2)

	r = f.get("/g")
	expect(t, r, 200, "MISS; partial")
	expectBytes(t, r, "0123456789", "")
	asked(t, f.origin, "bytes=3-6", `"v1"`)
	expect(t, f.get("/g"), 200, "HIT; layer=l1")
	expectOriginCount(t, f.origin, 3)
}

// A range that overlaps the stored part asks for the bytes it lacks only,
// and the client gets exactly its range.
func TestARangeOverlappingThePartAsksOnlyForWhatIsMissing(t *testing.T) {
	rp := newRep("0123456789", `"v1"`, "max-age=3600")
	f := newFixture(t, "", rp.serve)
	f.get("/o", "Range", "bytes=0-4")
	r := f.get("/o", "Range", "bytes=3-7")
	expect(t, r, 206, "MISS; partial")
	expectBytes(t, r, "34567", "bytes 3-7/10")
	asked(t, f.origin, "bytes=5-7", `"v1"`)
	expectBytes(t, f.get("/o", "Range", "bytes=0-7"), "01234567", "bytes 0-7/10")
	expectOriginCount(t, f.origin, 2)
}

// When the representation changed, If-Range makes the origin answer the
// gap's request with the whole new response, which the client gets and
// the cache stores in place of the old part.
func TestAChangedRepresentationAnswersTheGapWhole(t *testing.T) {
	rp := newRep("0123456789", `"v1"`, "max-age=3600")
	f := newFixture(t, "", rp.serve)
	f.get("/c", "Range", "bytes=0-4")
	rp.set("ABCDEFGHIJ", `"v2"`)

	r := f.get("/c")
	expect(t, r, 200, "MISS")
	expectBytes(t, r, "ABCDEFGHIJ", "")
	asked(t, f.origin, "bytes=5-", `"v1"`)
	r = f.get("/c", "Range", "bytes=0-4")
	expect(t, r, 206, "HIT; layer=l1")
	expectBytes(t, r, "ABCDE", "bytes 0-4/10")
}

// ignoresIfRange answers every range from the representation of the
// moment, ignoring If-Range (a broken origin or an intermediary that
// drops it).
func ignoresIfRange(rp *representation) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		r.Header.Del("If-Range")
		rp.serve(w, r)
	}
}

// A part with another ETag than the stored one is never combined with
// it: the client does not get bytes of two representations; what it
// wants is asked again as if nothing were stored.
func TestAPartOfAnotherRepresentationIsNeverCombined(t *testing.T) {
	rp := newRep("0123456789", `"v1"`, "max-age=3600")
	f := newFixture(t, "", ignoresIfRange(rp))
	f.get("/m", "Range", "bytes=0-4")
	rp.set("ABCDEFGHIJ", `"v2"`)

	r := f.get("/m")
	expect(t, r, 200, "MISS")
	expectBytes(t, r, "ABCDEFGHIJ", "")
	asked(t, f.origin, "", "")
	expectOriginCount(t, f.origin, 3) // the part, the gap, the whole

	// A range: the gap's answer is not combined; the client's range is
	// asked as it is, and its part replaces the old one.
	rq := newRep("0123456789", `"v1"`, "max-age=3600")
	g := newFixture(t, "", ignoresIfRange(rq))
	g.get("/m", "Range", "bytes=0-4")
	rq.set("ABCDEFGHIJ", `"v2"`)
	r = g.get("/m", "Range", "bytes=3-7")
	expect(t, r, 206, "MISS")
	expectBytes(t, r, "DEFGH", "bytes 3-7/10")
	asked(t, g.origin, "bytes=3-7", "")
	// Only the new part is held: the old bytes are asked again.
	r = g.get("/m", "Range", "bytes=0-4")
	expect(t, r, 206, "MISS; partial")
	expectBytes(t, r, "ABCDE", "bytes 0-4/10")
	asked(t, g.origin, "bytes=0-2", `"v2"`)
}

// lyingOrigin answers the first request with bytes 0-4 of a ten-byte
// representation (ETag "v1"), and every later one with answer.
func lyingOrigin(answer http.HandlerFunc) http.HandlerFunc {
	var mu sync.Mutex
	n := 0
	return func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		n++
		first := n == 1
		mu.Unlock()
		if !first {
			answer(w, r)
			return
		}
		w.Header().Set("Cache-Control", "max-age=3600")
		w.Header().Set("ETag", `"v1"`)
		w.Header().Set("Content-Range", "bytes 0-4/10")
		w.WriteHeader(http.StatusPartialContent)
		_, _ = io.WriteString(w, "01234")
	}
}

// chunked206 answers a 206 with contentRange whose body, of unknown
// length (chunked), is body.
func chunked206(contentRange, body string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=3600")
		w.Header().Set("ETag", `"v1"`)
		w.Header().Set("Content-Range", contentRange)
		w.WriteHeader(http.StatusPartialContent)
		for i := range len(body) {
			_, _ = io.WriteString(w, body[i:i+1])
			w.(http.Flusher).Flush()
		}
	}
}

// getRaw sends a GET and reads what it can: the error of a broken
// response is returned, not fatal.
func (f *fixture) getRaw(path string, hdr ...string) (response, error) {
	f.t.Helper()
	req, err := http.NewRequest("GET", f.srv.URL+path, nil)
	if err != nil {
		f.t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Add(hdr[i], hdr[i+1])
	}
	resp, err := f.srv.Client().Do(req)
	if err != nil {
		return response{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return response{resp.StatusCode, resp.Header, string(b)}, err
}

// A gap answered with fewer bytes than its Content-Range names (a chunked
// body, so framing cannot tell) breaks the client's response off, and
// nothing is stored: the next full GET asks for the gap again rather than
// serving a short body as the whole.
func TestAGapAnswerShortOfItsContentRangeBreaksTheResponseAndStoresNothing(t *testing.T) {
	f := newFixture(t, "", lyingOrigin(chunked206("bytes 5-9/10", "567")))
	f.get("/short", "Range", "bytes=0-4")
	if _, err := f.getRaw("/short"); err == nil {
		t.Fatal("a response short of its Content-Length looked complete")
	}
	asked(t, f.origin, "bytes=5-", `"v1"`)
	if _, err := f.getRaw("/short"); err == nil {
		t.Fatal("the second response looked complete too")
	}
	expectOriginCount(t, f.origin, 3)
	asked(t, f.origin, "bytes=5-", `"v1"`)
}

// A gap answered with more bytes than its Content-Range names is not
// combined either: the client's response is broken off before its last
// byte, and nothing is stored.
func TestAGapAnswerLongerThanItsContentRangeBreaksTheResponseAndStoresNothing(t *testing.T) {
	f := newFixture(t, "", lyingOrigin(chunked206("bytes 5-9/10", "56789XYZ")))
	f.get("/long", "Range", "bytes=0-4")
	r, err := f.getRaw("/long")
	if err == nil {
		t.Fatalf("a response past its Content-Range looked complete: %q", r.body)
	}
	if strings.Contains(r.body, "X") {
		t.Fatalf("bytes past the Content-Range reached the client: %q", r.body)
	}
	if _, err := f.getRaw("/long"); err == nil {
		t.Fatal("the second response looked complete too")
	}
	expectOriginCount(t, f.origin, 3)
}

// A gap answer whose Content-Length differs from the length of its
// Content-Range is not combined: the client gets what it asked for from a
// whole fetch.
func TestAGapAnswerWhoseContentLengthDisagreesIsAskedAgainWhole(t *testing.T) {
	full := newRep("0123456789", `"v1"`, "max-age=3600")
	f := newFixture(t, "", lyingOrigin(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Range") != "" {
			w.Header().Set("ETag", `"v1"`)
			w.Header().Set("Content-Range", "bytes 5-9/10")
			w.Header().Set("Content-Length", "3")
			w.WriteHeader(http.StatusPartialContent)
			_, _ = io.WriteString(w, "567")
			return
		}
		full.serve(w, r)
	}))
	f.get("/cl", "Range", "bytes=0-4")
	r := f.get("/cl")
	expect(t, r, 200, "MISS")
	expectBytes(t, r, "0123456789", "")
	asked(t, f.origin, "", "")
	expectOriginCount(t, f.origin, 3)
}

// A forwarded range answered with fewer bytes than its Content-Range
// names reaches the client as the origin framed it, and is not stored: it
// would fill bytes the stored parts lack with nothing.
func TestAForwardedPartShortOfItsContentRangeIsNotStored(t *testing.T) {
	rp := newRep("0123456789", `"v1"`, "max-age=3600")
	var mu sync.Mutex
	lie := false
	f := newFixture(t, "", func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		l := lie
		mu.Unlock()
		if l {
			chunked206("bytes 0-9/10", "01234")(w, r)
			return
		}
		rp.serve(w, r)
	})
	f.get("/fw", "Range", "bytes=3-4")
	mu.Lock()
	lie = true
	mu.Unlock()
	// Two gaps (0-2, 5-9): the client's range is forwarded as it is.
	r := f.get("/fw", "Range", "bytes=0-9")
	asked(t, f.origin, "bytes=0-9", "")
	if r.status != 206 || r.body != "01234" {
		t.Fatalf("the client got %d %q, want the origin's 206 as framed", r.status, r.body)
	}
	mu.Lock()
	lie = false
	mu.Unlock()
	r = f.get("/fw", "Range", "bytes=4-6")
	if r.body != "456" {
		t.Fatalf("got %q (%s): bytes the origin never sent were stored", r.body, r.xcache())
	}
}

// A Content-Range past the complete length is not stored (not even as a
// value L1 would refuse to decode).
func TestAContentRangePastTheLengthIsNotStored(t *testing.T) {
	f := newFixture(t, "", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=3600")
		w.Header().Set("ETag", `"v1"`)
		w.Header().Set("Content-Range", "bytes 5-10/10")
		w.WriteHeader(http.StatusPartialContent)
		_, _ = io.WriteString(w, "56789X")
	})
	r := f.get("/oob", "Range", "bytes=5-")
	if r.status != 206 || r.body != "56789X" {
		t.Fatalf("the client got %d %q, want the origin's answer as framed", r.status, r.body)
	}
	if n := f.cache.Stats().Entries; n != 0 {
		t.Fatalf("L1 holds %d entries after a 206 past its length", n)
	}
}

// A part whose complete length differs from the stored part's (the same
// ETag) is never combined with it, and replaces it.
func TestAPartOfAnotherLengthIsNeverCombined(t *testing.T) {
	f := newFixture(t, "", lyingOrigin(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=3600")
		w.Header().Set("ETag", `"v1"`)
		w.Header().Set("Content-Range", "bytes 7-9/12")
		w.WriteHeader(http.StatusPartialContent)
		_, _ = io.WriteString(w, "789")
	}))
	f.get("/len", "Range", "bytes=0-4")
	r := f.get("/len", "Range", "bytes=7-9")
	expectBytes(t, r, "789", "bytes 7-9/12")
	// The part of ten bytes is gone: its bytes are never served as part
	// of the twelve-byte representation.
	r = f.get("/len", "Range", "bytes=0-4")
	if r.xcache() == "HIT; layer=l1" {
		t.Fatalf("a part of the ten-byte representation was served as part of the twelve-byte one: %q %q",
			r.body, r.header.Get("Content-Range"))
	}
}

// A stale part with a validator is validated by the gap's If-Range: the
// origin's 206 proves the stored bytes current, and the combined response
// is stored complete with the new freshness.
func TestAStalePartIsValidatedByIfRange(t *testing.T) {
	rp := newRep("0123456789", `"v1"`, "max-age=60")
	f := newFixture(t, "", rp.serve)
	f.get("/st", "Range", "bytes=0-4")
	f.clock.Advance(2 * time.Minute)
	r := f.get("/st")
	expect(t, r, 200, "MISS; partial")
	expectBytes(t, r, "0123456789", "")
	asked(t, f.origin, "bytes=5-", `"v1"`)
	expect(t, f.get("/st"), 200, "HIT; layer=l1")
}

// A part is never stored over a complete response: a range fill that
// ends after a full fill stored the representation leaves it in place.
func TestAPartNeverReplacesACompleteResponse(t *testing.T) {
	rp := newRep("0123456789", `"v1"`, "max-age=3600")
	rangeArrived, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	f := newFixture(t, "", func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Range") != "" {
			once.Do(func() {
				close(rangeArrived)
				select {
				case <-release:
				case <-time.After(10 * time.Second):
				}
			})
		}
		rp.serve(w, r)
	})
	done := make(chan response)
	go func() {
		r, _ := f.getRaw("/full", "Range", "bytes=0-4")
		done <- r
	}()
	select {
	case <-rangeArrived:
	case <-time.After(10 * time.Second):
		t.Fatal("the range never reached the origin")
	}
	expect(t, f.get("/full"), 200, "MISS")
	close(release)
	select {
	case r := <-done:
		expectBytes(t, r, "01234", "bytes 0-4/10")
	case <-time.After(10 * time.Second):
		t.Fatal("the range fill never ended")
	}
	expect(t, f.get("/full"), 200, "HIT; layer=l1")
	expectOriginCount(t, f.origin, 2)
}

// A part whose fill a purge overtakes is served but not stored.
func TestAPartOvertakenByAPurgeIsNotStored(t *testing.T) {
	rp := newRep("0123456789", `"v1"`, "max-age=3600")
	arrived, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	f := newFixture(t, "", func(w http.ResponseWriter, r *http.Request) {
		once.Do(func() {
			close(arrived)
			select {
			case <-release:
			case <-time.After(10 * time.Second):
			}
		})
		rp.serve(w, r)
	})
	done := make(chan response)
	go func() {
		r, _ := f.getRaw("/pg", "Range", "bytes=0-4")
		done <- r
	}()
	select {
	case <-arrived:
	case <-time.After(10 * time.Second):
		t.Fatal("the range never reached the origin")
	}
	if _, err := f.purger.Purge(context.Background(), invalidate.Request{URLs: []string{"/pg"}}); err != nil {
		t.Fatal(err)
	}
	close(release)
	select {
	case r := <-done:
		expectBytes(t, r, "01234", "bytes 0-4/10")
	case <-time.After(10 * time.Second):
		t.Fatal("the range fill never ended")
	}
	expect(t, f.get("/pg", "Range", "bytes=0-4"), 206, "MISS")
}

// A 206 that varies is stored as the variant of the request that caused
// it; another variant does not get its bytes.
func TestAPartIsStoredAsItsVariant(t *testing.T) {
	f := newFixture(t, "", func(w http.ResponseWriter, r *http.Request) {
		body := "0123456789"
		if r.Header.Get("Accept-Language") == "fr" {
			body = "ABCDEFGHIJ"
		}
		w.Header().Set("Cache-Control", "max-age=3600")
		w.Header().Set("Vary", "Accept-Language")
		w.Header().Set("ETag", `"`+body[:1]+`"`)
		http.ServeContent(w, r, "", time.Time{}, strings.NewReader(body))
	})
	expectBytes(t, f.get("/v", "Range", "bytes=0-4", "Accept-Language", "en"), "01234", "bytes 0-4/10")
	r := f.get("/v", "Range", "bytes=0-4", "Accept-Language", "fr")
	expect(t, r, 206, "MISS")
	expectBytes(t, r, "ABCDE", "bytes 0-4/10")
	r = f.get("/v", "Range", "bytes=1-3", "Accept-Language", "en")
	expect(t, r, 206, "HIT; layer=l1")
	expectBytes(t, r, "123", "bytes 1-3/10")
}

// What is stored as a part is the origin's answer: a request that asked
// for several ranges, or another unit, is forwarded and its answer not
// stored.
func TestOnlyAnswersToASingleByteRangeAreStored(t *testing.T) {
	rp := newRep("0123456789", `"v1"`, "max-age=3600")
	f := newFixture(t, "", rp.serve)
	expect(t, f.get("/multi", "Range", "bytes=0-1,5-6"), 206, "MISS")
	expect(t, f.get("/multi", "Range", "bytes=0-1"), 206, "MISS")
	expectOriginCount(t, f.origin, 2)
	expect(t, f.get("/multi", "Range", "bytes=0-1"), 206, "HIT; layer=l1")
}

// A purge removes a stored part and counts it like any stored response.
func TestAPurgeRemovesAndCountsAStoredPart(t *testing.T) {
	rp := newRep("0123456789", `"v1"`, "max-age=3600")
	f := newFixture(t, "", rp.serve)
	f.get("/pp", "Range", "bytes=0-4")
	expect(t, f.get("/pp", "Range", "bytes=0-1"), 206, "HIT; layer=l1")
	res, err := f.purger.Purge(context.Background(), invalidate.Request{URLs: []string{"/pp"}})
	if err != nil || res.Purged != 1 {
		t.Fatalf("purge: %+v, %v; want 1 purged", res, err)
	}
	expect(t, f.get("/pp", "Range", "bytes=0-1"), 206, "MISS")
}

// A part stays in the L1 of the replica that received it, and never
// shadows a complete response in L2: a replica whose part lacks what a
// request needs takes the complete response another replica stored in
// L2 instead of asking the origin.
func TestAPartInL1NeverShadowsACompleteResponseInL2(t *testing.T) {
	redis := testredis.Start(t)
	rp := newRep("0123456789", `"v1"`, "max-age=3600")
	o := newOrigin(t, rp.serve)
	a, b, witness := replica(t, redis.Addr(), o), replica(t, redis.Addr(), o), replica(t, redis.Addr(), o)

	r := b.get("/sh", "Host", "shop", "Range", "bytes=0-4")
	expect(t, r, 206, "MISS")
	// Not in L2: another replica has nothing to answer from.
	if r := a.get("/sh", "Host", "shop", "Range", "bytes=0-4", "Cache-Control", "only-if-cached"); r.status != 504 {
		t.Fatalf("another replica answered %d %q from B's part", r.status, r.body)
	}
	expect(t, a.get("/sh", "Host", "shop"), 200, "MISS")
	waitFor(t, func() bool {
		return witness.get("/sh", "Host", "shop", "Cache-Control", "only-if-cached").status == 200
	}, "A's fill to reach L2")
	expectOriginCount(t, o, 2)

	r = b.get("/sh", "Host", "shop")
	expect(t, r, 200, "HIT; layer=l2")
	expectBytes(t, r, "0123456789", "")
	expect(t, b.get("/sh", "Host", "shop", "Range", "bytes=7-9"), 206, "HIT; layer=l1")
	expectOriginCount(t, o, 2)
}

// If-Range is evaluated against the part as against a complete response:
// a client whose validator is not the stored one wants the whole
// representation, and gets it (the missing run asked as usual).
func TestAFailedIfRangeGetsTheWholeRepresentation(t *testing.T) {
	rp := newRep("0123456789", `"v1"`, "max-age=3600")
	f := newFixture(t, "", rp.serve)
	f.get("/ir", "Range", "bytes=0-4")
	r := f.get("/ir", "Range", "bytes=0-1", "If-Range", `"v0"`)
	expect(t, r, 200, "MISS; partial")
	expectBytes(t, r, "0123456789", "")
	asked(t, f.origin, "bytes=5-", `"v1"`)
	r = f.get("/ir", "Range", "bytes=0-1", "If-Range", `"v1"`)
	expect(t, r, 206, "HIT; layer=l1")
	expectBytes(t, r, "01", "bytes 0-1/10")
}

// A Last-Modified a second or more before Date is a strong validator: the
// part is stored and its missing run asked with that date in If-Range.
func TestAStrongLastModifiedIsSentAsIfRange(t *testing.T) {
	modified := time.Now().Add(-time.Hour).UTC().Truncate(time.Second)
	f := newFixture(t, "", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=3600")
		http.ServeContent(w, r, "", modified, strings.NewReader("0123456789"))
	})
	f.get("/lm", "Range", "bytes=0-4")
	r := f.get("/lm")
	expect(t, r, 200, "MISS; partial")
	expectBytes(t, r, "0123456789", "")
	asked(t, f.origin, "bytes=5-", modified.Format(http.TimeFormat))
}

// A part whose only validator is a weak ETag is not stored: it could be
// neither checked with If-Range nor combined.
func TestAPartWithOnlyAWeakETagIsNotStored(t *testing.T) {
	rp := newRep("0123456789", `W/"v1"`, "max-age=3600")
	f := newFixture(t, "", rp.serve)
	expect(t, f.get("/weak", "Range", "bytes=0-4"), 206, "MISS")
	expect(t, f.get("/weak", "Range", "bytes=0-4"), 206, "MISS")
	expectOriginCount(t, f.origin, 2)
}

// Full GETs that complete the same part are collapsed: one request for
// the missing run, and the requests that waited get the complete
// response.
func TestFullGetsCompletingAPartAreCollapsed(t *testing.T) {
	rp := newRep("0123456789", `"v1"`, "max-age=3600")
	arrived, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	f := newFixture(t, "", func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Range") == "bytes=5-" {
			once.Do(func() {
				close(arrived)
				select {
				case <-release:
				case <-time.After(10 * time.Second):
				}
			})
		}
		rp.serve(w, r)
	})
	f.get("/herd", "Range", "bytes=0-4")
	first := make(chan response)
	go func() {
		r, _ := f.getRaw("/herd")
		first <- r
	}()
	select {
	case <-arrived:
	case <-time.After(10 * time.Second):
		t.Fatal("the missing run was never asked")
	}
	second := make(chan response)
	go func() {
		r, _ := f.getRaw("/herd")
		second <- r
	}()
	waitFor(t, func() bool { return testCounter(f.px.m.Coalesced) == 1 }, "the second GET to wait for the first")
	close(release)
	for i, ch := range []chan response{first, second} {
		select {
		case r := <-ch:
			if r.status != 200 || r.body != "0123456789" {
				t.Fatalf("GET %d got %d %q", i+1, r.status, r.body)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("GET %d never ended", i+1)
		}
	}
	expectOriginCount(t, f.origin, 2)
}

// A gap the representation no longer has (the origin answers 416 to it,
// ignoring If-Range) means the representation changed: a full GET is
// fetched whole, never answered 416.
func TestAGapPastAShortenedRepresentationIsFetchedWhole(t *testing.T) {
	rp := newRep("0123456789", `"v1"`, "max-age=3600")
	f := newFixture(t, "", ignoresIfRange(rp))
	f.get("/shrunk", "Range", "bytes=0-4")
	rp.set("0123", `"v2"`)
	r := f.get("/shrunk")
	expect(t, r, 200, "MISS")
	expectBytes(t, r, "0123", "")
	asked(t, f.origin, "", "")
	expectOriginCount(t, f.origin, 3)
}

// Read your own fill, for parts: a client that has the last byte of a
// part (forwarded range), or of a response completed from a part, and
// asks again at once, on its other connection (one connection's next
// request waits for its handler to return), finds what was stored
// (stallingStore makes a store after the last byte lose that race every
// time).
func TestTheNextRequestOfAClientFindsItsPart(t *testing.T) {
	rp := newRep("0123456789", `"v1"`, "max-age=3600")
	f := newFixtureWith(t, "", newOrigin(t, rp.serve), stalling(300*time.Millisecond), nil)
	var conns [2]*http.Client
	for i := range conns {
		tr := &http.Transport{}
		t.Cleanup(tr.CloseIdleConnections)
		conns[i] = &http.Client{Transport: tr, Timeout: 10 * time.Second}
	}
	for i, step := range []struct {
		rng, xcache string
		status      int
	}{
		{"bytes=0-4", "MISS", 206},
		{"bytes=0-4", "HIT; layer=l1", 206},
		{"bytes=2-6", "MISS; partial", 206},
		{"bytes=5-6", "HIT; layer=l1", 206},
		{"", "MISS; partial", 200},
		{"", "HIT; layer=l1", 200},
	} {
		req, err := http.NewRequest("GET", f.srv.URL+"/own", nil)
		if err != nil {
			t.Fatal(err)
		}
		if step.rng != "" {
			req.Header.Set("Range", step.rng)
		}
		resp, err := conns[i%2].Do(req)
		if err != nil {
			t.Fatalf("step %d: %v", i+1, err)
		}
		_, err = io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != step.status || resp.Header.Get("X-Cache") != step.xcache {
			t.Fatalf("step %d (%q): %d %q (%v), want %d %q", i+1, step.rng, resp.StatusCode, resp.Header.Get("X-Cache"), err,
				step.status, step.xcache)
		}
	}
}

// A stored part counts as stored for defaults.forwardClientValidators: the
// client's validators are not sent with the request for the part's
// missing run, whose answer then completes and refreshes the stored
// representation (and answers the client's conditional).
func TestAClientsValidatorsAreNotForwardedWithAPartsMissingRun(t *testing.T) {
	rp := newRep("0123456789", `"v1"`, "max-age=60")
	f := newFixture(t, "defaults: {forwardClientValidators: true}", rp.serve)
	f.get("/fv", "Range", "bytes=0-4")
	f.clock.Advance(2 * time.Minute)
	expect(t, f.get("/fv", "If-None-Match", `"v1"`), 304, "MISS; partial")
	if inm := f.origin.last().Header.Get("If-None-Match"); inm != "" {
		t.Fatalf("the client's If-None-Match %q went with the request for the missing run", inm)
	}
	asked(t, f.origin, "bytes=5-", `"v1"`)
	r := f.get("/fv")
	expect(t, r, 200, "HIT; layer=l1")
	expectBytes(t, r, "0123456789", "")
}

// A representation completed from parts keeps the stale-if-unreachable
// window (defaults.staleIfUnreachable, 10m by default) like any other
// stored response: once the origin is gone, it stands in stale.
func TestARepresentationCompletedFromPartsStandsInForAStoppedOrigin(t *testing.T) {
	rp := newRep("0123456789", `"v1"`, "max-age=2")
	o := newOrigin(t, rp.serve)
	f := newFixtureFor(t, "", o)
	expectBytes(t, f.get("/u", "Range", "bytes=0-4"), "01234", "bytes 0-4/10")
	expect(t, f.get("/u"), 200, "MISS; partial")
	o.Close()
	f.clock.Advance(time.Minute)
	r := f.get("/u")
	expect(t, r, 200, "STALE; layer=l1")
	expectBytes(t, r, "0123456789", "")
}
