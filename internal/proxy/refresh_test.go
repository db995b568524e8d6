package proxy

import (
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"
)

// Background refreshes serve nobody who waits, so at most maxRefreshes
// run at once; the rest are not started (the stale response is served and
// a later request refreshes), and a cold miss never waits behind them.
func TestBackgroundRefreshesAreBoundedAndAMissStillGoesThrough(t *testing.T) {
	unblock := make(chan struct{})
	arrived := make(chan string, 4*maxRefreshes)
	f := newFixture(t, "", func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("If-None-Match") != "" { // a refresh
			arrived <- r.URL.Path
			<-unblock
			w.WriteHeader(http.StatusNotModified)
			return
		}
		w.Header().Set("Cache-Control", "max-age=1, stale-while-revalidate=3600")
		w.Header().Set("ETag", `"v1"`)
		_, _ = io.WriteString(w, "body")
	})
	released := false
	release := func() {
		if !released {
			released = true
			close(unblock)
		}
	}
	t.Cleanup(release) // before the fixture's cleanup, which waits for refreshes

	const keys = maxRefreshes + 5
	for i := range keys {
		expect(t, f.get(fmt.Sprintf("/k%d", i)), 200, "MISS")
	}
	f.clock.Advance(2 * time.Second)
	for i := range keys {
		expect(t, f.get(fmt.Sprintf("/k%d", i)), 200, "STALE; layer=l1")
	}
	// Every started refresh holds its key's flight until it ends, and
	// none can end before unblock.
	running := 0
	for i := range keys {
		if f.px.flights.Running(f.flightKey(fmt.Sprintf("/k%d", i))) != nil {
			running++
		}
	}
	if running != maxRefreshes {
		t.Fatalf("%d refreshes running for %d stale keys, want %d", running, keys, maxRefreshes)
	}

	// While every refresh slot is taken, a cold miss goes to the origin.
	expect(t, f.get("/cold"), 200, "MISS")

	release()
	deadline := time.Now().Add(5 * time.Second)
	for f.px.refreshes.n.Load() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d refreshes still running after they were released", f.px.refreshes.n.Load())
		}
		time.Sleep(time.Millisecond)
	}
	// A key whose refresh was not started is refreshed by its next
	// request (the first keys' refreshes revalidated them; the last were
	// deferred).
	for len(arrived) > 0 {
		<-arrived
	}
	expect(t, f.get(fmt.Sprintf("/k%d", keys-1)), 200, "STALE; layer=l1")
	select {
	case p := <-arrived:
		if p != fmt.Sprintf("/k%d", keys-1) {
			t.Fatalf("refresh of %s, want /k%d", p, keys-1)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the deferred key was not refreshed by its next request")
	}
}
