package proxy

import (
	"fmt"
	"io"
	"net/http"
	"sync/atomic"
	"testing"
)

// A fill that completes between a request's miss and its joining a flight
// is found by the flight's leader when it looks again (coalesce's
// re-check), as groupcache's load looks again inside its flight: the
// origin is asked once, and the second request is a hit of what the first
// stored. Without the re-check the leader fetches a second time.
func TestALeaderFindsAFillThatCompletedBeforeItJoined(t *testing.T) {
	f := newFixture(t, "", cacheFor("max-age=60", "stored once"))
	var armed atomic.Bool
	armed.Store(true)
	inner := make(chan error, 1)
	f.px.flights.BeforeJoin = func(string) {
		if !armed.CompareAndSwap(true, false) {
			return // the inner request's own join, and any later one
		}
		// Another client's miss for the same key runs its whole fill
		// now, after the outer request missed and before it joins.
		resp, err := f.srv.Client().Get(f.srv.URL + "/race")
		if err == nil {
			_, err = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if err == nil && (resp.StatusCode != http.StatusOK || resp.Header.Get("X-Cache") != "MISS") {
				err = fmt.Errorf("answered %s, X-Cache %q; want 200 MISS", resp.Status, resp.Header.Get("X-Cache"))
			}
		}
		inner <- err
	}
	r := f.get("/race")
	if err := <-inner; err != nil {
		t.Fatalf("the inner request: %v", err)
	}
	expect(t, r, http.StatusOK, "HIT; layer=l1")
	if r.body != "stored once" {
		t.Fatalf("body %q, want the stored one", r.body)
	}
	if n := f.origin.count(); n != 1 {
		t.Fatalf("the origin was asked %d times, want 1: the leader did not look again inside its flight", n)
	}
}
