package proxy

import (
	"bytes"
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// A client that stops reading never paces an in-memory fill.
//
// ATTACK: a client asks for a hot cacheable URL just as its entry
// expires, and then does not read. An in-memory fill wrote each read of
// the origin's body to that client before reading the next, so once the
// socket buffers were full the fill stopped: the origin's body was read
// no further, every request for the URL waited on the flight until
// origin.idleTimeout or origin.timeout (30 s by default) let it go, then
// all went to the origin at once, and nothing was stored. One connection
// per hot URL held the URL from everyone, again at each expiry. (The same
// held for file fills; attack12_test.go has their test.)
// Defence (fillclient.go): while a fill collects its body, its client is
// written from the collected bytes on a goroutine of its own.
func TestAClientThatStopsReadingNeverPacesAnInMemoryFill(t *testing.T) {
	const size = 24 << 20 // far above what the socket buffers of a loopback connection hold
	body := payload(31, size)
	sent := make(chan struct{})
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=300")
		w.Header().Set("Content-Length", strconv.Itoa(size))
		_, _ = w.Write(body) // as fast as loopback goes
		if r.URL.Path == "/hot" {
			close(sent)
		}
	})
	f := newFixtureFor(t, "l1: {maxSize: 256Mi, maxEntrySize: 32Mi, shards: 4}", o)

	dialSlowReader(t, f.srv.Listener.Addr().String(), "/hot")
	select {
	case <-sent:
	case <-time.After(15 * time.Second):
		t.Fatal("the origin could not send its body within 15s: the fill reads it only as fast as the client " +
			"that started it, which reads nothing")
	}

	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, f.srv.URL+"/hot", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp := f.send(req)
	if resp.status != http.StatusOK || resp.body != string(body) {
		t.Fatalf("an honest client got status %d and %d of %d bytes", resp.status, len(resp.body), size)
	}
	if x := resp.xcache(); !strings.HasPrefix(x, "HIT") && x != "MISS; coalesced" {
		t.Fatalf("an honest client was answered %q, want the stalled client's fill", x)
	}
	if n := o.count(); n != 1 {
		t.Fatalf("origin requests: %d, want 1", n)
	}
}

// The client of an in-memory fill gets its body whole and in order
// however the origin's reads and the client's writes interleave: each
// read of a body of unknown length is written on the client's goroutine
// while the next is collected.
func TestAnInMemoryFillOfManyReadsReachesItsClientWholeAndInOrder(t *testing.T) {
	const size = 3 << 20
	body := payload(32, size)
	o := newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=300")
		rc := http.NewResponseController(w)
		for off := 0; off < size; off += 7001 { // chunked, in odd pieces
			_, _ = w.Write(body[off:min(off+7001, size)])
			_ = rc.Flush()
		}
	})
	f := newFixtureFor(t, "l1: {maxSize: 64Mi, maxEntrySize: 4Mi, shards: 4}", o)
	for i, want := range []string{"MISS", "HIT"} {
		r := f.get("/many")
		if r.status != http.StatusOK || !strings.HasPrefix(r.xcache(), want) || !bytes.Equal([]byte(r.body), body) {
			t.Fatalf("request %d: status %d, X-Cache %q, %d of %d bytes, equal %v", i, r.status, r.xcache(), len(r.body), size, r.body == string(body))
		}
	}
}
