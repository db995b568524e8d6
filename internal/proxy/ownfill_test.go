package proxy

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tiercache/tiercache/internal/bodystore"
	"github.com/tiercache/tiercache/internal/entry"
)

// stallingStore holds every store of a response until a lookup of the
// same key has completed after the store began, or until stall has
// passed. A client that has its fill's complete response before the fill
// is stored, and asks again at once, looks the key up exactly in that
// window: the store then lands just after the lookup missed, every time.
// When the final byte waits for the store, no such lookup can come, and
// the store waits out stall.
type stallingStore struct {
	Store
	stall time.Duration

	mu     sync.Mutex
	looked map[string]chan struct{} // closed when a lookup of the key completes
}

func stalling(stall time.Duration) func(*Options) {
	return func(o *Options) {
		o.Store = &stallingStore{Store: o.Store, stall: stall, looked: make(map[string]chan struct{})}
	}
}

func (s *stallingStore) Get(ctx context.Context, key string, e *entry.Entry) (string, error) {
	layer, err := s.Store.Get(ctx, key, e)
	s.mu.Lock()
	if ch, ok := s.looked[key]; ok {
		close(ch)
		delete(s.looked, key)
	}
	s.mu.Unlock()
	return layer, err
}

func (s *stallingStore) Set(ctx context.Context, key string, e *entry.Entry) error {
	if e.Kind == entry.KindResponse || e.Kind == entry.KindPartial {
		s.mu.Lock()
		ch, ok := s.looked[key]
		if !ok {
			ch = make(chan struct{})
			s.looked[key] = ch
		}
		s.mu.Unlock()
		t := time.NewTimer(s.stall)
		select {
		case <-ch:
		case <-t.C:
		}
		t.Stop()
	}
	return s.Store.Set(ctx, key, e)
}

// ownFillOrigin answers /<kind>/... for the kinds of fill of
// TestTheNextRequestOfAClientFindsItsFill.
func ownFillOrigin(t *testing.T, big []byte) *origin {
	var o *origin
	o = newOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		kind, _, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
		switch kind {
		case "length":
			h.Set("Cache-Control", "max-age=60")
			h.Set("Content-Length", "11")
			_, _ = io.WriteString(w, "short body.")
		case "chunked":
			h.Set("Cache-Control", "max-age=60")
			_, _ = io.WriteString(w, "short ")
			http.NewResponseController(w).Flush() // no Content-Length: chunked
			_, _ = io.WriteString(w, "body.")
		case "file", "filechunked":
			h.Set("Cache-Control", "max-age=60")
			if kind == "file" {
				h.Set("Content-Length", strconv.Itoa(len(big)))
			}
			half := len(big) / 2
			_, _ = w.Write(big[:half])
			http.NewResponseController(w).Flush()
			_, _ = w.Write(big[half:])
		case "nocache":
			// Stored, and revalidated with its ETag on every use
			// (RFC 9111 §5.2.2.4).
			h.Set("Cache-Control", "no-cache")
			h.Set("ETag", `"v1"`)
			if r.Header.Get("If-None-Match") == `"v1"` {
				w.WriteHeader(http.StatusNotModified)
				return
			}
			_, _ = io.WriteString(w, "validated.")
		case "expired":
			// Stale on arrival: its Age is past Expires - Date (RFC 9111
			// §4.2.3); the next request revalidates with Last-Modified,
			// and the 304 makes it fresh (the stored Age goes).
			now := o.clock.Now()
			h.Set("Expires", now.Add(10*time.Second).UTC().Format(http.TimeFormat))
			h.Set("Last-Modified", now.Add(-time.Hour).UTC().Format(http.TimeFormat))
			if r.Header.Get("If-Modified-Since") != "" {
				w.WriteHeader(http.StatusNotModified)
				return
			}
			h.Set("Age", "30")
			_, _ = io.WriteString(w, "expired.")
		default:
			t.Errorf("unexpected request %s", r.URL)
			w.WriteHeader(http.StatusNotFound)
		}
	})
	return o
}

// TestTheNextRequestOfAClientFindsItsFill: once a client has the complete
// response of a cacheable fill, the request it sends next for the same
// key finds the stored response (a hit, or the revalidation a no-cache or
// stale response needs), never the fill still running: not a second
// origin fetch, not the fill's response again as a collapsed miss. Each
// client sends its next request the instant its previous body ends, on
// its other connection (one connection's next request waits for its
// handler to return), 25 clients at once. The store is held until a
// lookup of its key comes (stallingStore), so a final byte that leaves
// before the store is caught every time.
func TestTheNextRequestOfAClientFindsItsFill(t *testing.T) {
	big := payload(13, fileSize)
	o := ownFillOrigin(t, big)
	f := newFileFixture(t, "", o, bodystore.Options{}, stalling(50*time.Millisecond))

	type step struct {
		xcache string
		body   string
	}
	kinds := []struct {
		name  string
		path  string
		steps []step
		// origin requests for the URL, and how many were conditional
		requests, conditional int
	}{
		{"an inline body with a Content-Length", "length", []step{{"MISS", "short body."}, {"HIT; layer=l1", "short body."}}, 1, 0},
		{"an inline body of unknown length", "chunked", []step{{"MISS", "short body."}, {"HIT; layer=l1", "short body."}}, 1, 0},
		{"a body file with a Content-Length", "file", []step{{"MISS", string(big)}, {"HIT; layer=l1", string(big)}}, 1, 0},
		{"a body file of unknown length", "filechunked", []step{{"MISS", string(big)}, {"HIT; layer=l1", string(big)}}, 1, 0},
		{"a no-cache response, revalidated on every use", "nocache",
			[]step{{"MISS", "validated."}, {"REVALIDATED", "validated."}, {"REVALIDATED", "validated."}}, 3, 2},
		{"a response stale on arrival (Expires, Age)", "expired",
			[]step{{"MISS", "expired."}, {"REVALIDATED", "expired."}, {"HIT; layer=l1", "expired."}}, 2, 1},
	}
	const clients, rounds = 25, 3
	deadline := time.Now().Add(60 * time.Second)
	var wg sync.WaitGroup
	for g := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			conns := [2]*http.Client{}
			for i := range conns {
				tr := &http.Transport{}
				defer tr.CloseIdleConnections()
				conns[i] = &http.Client{Transport: tr, Timeout: 20 * time.Second}
			}
			for round := range rounds {
				for _, k := range kinds {
					if time.Now().After(deadline) {
						t.Errorf("client %d: out of time", g)
						return
					}
					path := fmt.Sprintf("/%s/%d/%d", k.path, g, round)
					for i, want := range k.steps {
						resp, err := conns[i%2].Get(f.srv.URL + path)
						if err != nil {
							t.Errorf("%s: GET %s (step %d): %v", k.name, path, i+1, err)
							return
						}
						b, err := io.ReadAll(resp.Body)
						resp.Body.Close()
						if err != nil || resp.StatusCode != 200 || string(b) != want.body {
							t.Errorf("%s: GET %s (step %d): %d with %d bytes (%v), want 200 with %d",
								k.name, path, i+1, resp.StatusCode, len(b), err, len(want.body))
							return
						}
						if x := resp.Header.Get("X-Cache"); x != want.xcache {
							t.Errorf("%s: GET %s (step %d): X-Cache %q, want %q", k.name, path, i+1, x, want.xcache)
						}
					}
				}
			}
		}()
	}
	wg.Wait()

	got := map[string][2]int{}
	o.mu.Lock()
	for _, r := range o.requests {
		c := got[r.URL.Path]
		c[0]++
		if r.Header.Get("If-None-Match") != "" || r.Header.Get("If-Modified-Since") != "" {
			c[1]++
		}
		got[r.URL.Path] = c
	}
	o.mu.Unlock()
	for g := range clients {
		for round := range rounds {
			for _, k := range kinds {
				path := fmt.Sprintf("/%s/%d/%d", k.path, g, round)
				if c := got[path]; c != [2]int{k.requests, k.conditional} {
					t.Errorf("%s: the origin saw %d requests for %s (%d conditional), want %d (%d)",
						k.name, c[0], path, c[1], k.requests, k.conditional)
				}
			}
		}
	}
}
