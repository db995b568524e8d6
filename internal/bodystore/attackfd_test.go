package bodystore

import (
	"bytes"
	"crypto/tls"
	"errors"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"
	"unsafe"

	"github.com/tiercache/tiercache/internal/entry"
)

// TestAKeptDescriptorIsNotServedForAnotherKeyWhenTheCallersKeyBufferIsReused:
// the proxy hands Open a key that aliases a pooled buffer
// (cachekey.Builder.Key is an unsafe.String over it), which the next
// request overwrites with its own key. A kept descriptor must not keep
// the caller's string: its key check would then compare the next
// request's key with itself, and a reference to one key's file found
// under another key (which Open refuses: "the file belongs to another
// key") would be served that file.
func TestAKeptDescriptorIsNotServedForAnotherKeyWhenTheCallersKeyBufferIsReused(t *testing.T) {
	s, _ := testStore(t, Options{})
	const keyA, keyB = "GET h/a", "GET h/b" // one length, as /x?id=1 and /x?id=2
	refA := put(t, s, keyA, body(1, 70<<10), 70<<10)
	put(t, s, keyB, body(2, 70<<10), 70<<10)

	// The hit on A, with its key in a buffer the caller reuses.
	buf := []byte(keyA)
	b, err := s.Open(unsafe.String(&buf[0], len(buf)), refA)
	must(t, err)
	must(t, b.Close())
	// The buffer now holds the next request's key.
	copy(buf, keyB)

	// An entry under B that names A's file (what the header check exists
	// for) is never served A's body.
	if b, err := s.Open(keyB, refA); !errors.Is(err, ErrMismatch) {
		if err == nil {
			_ = b.Close()
		}
		t.Fatalf("Open(B, A's reference) after A's hit = %v, want ErrMismatch: B would be sent A's body", err)
	}
	// A's own hits still share the kept descriptor.
	got := read(t, s, keyA, refA)
	if string(got) != string(body(1, 70<<10)) {
		t.Fatal("A's hit read another body")
	}
	if n := descriptorsOf(t, s); n != 1 {
		t.Fatalf("%d descriptors after A's hits, want the one kept", n)
	}
}

// TestPurgesCloseKeptDescriptorsAndLaterHitsMiss: once RemoveKey,
// RemoveMatching or Remove returns, the purged file's kept descriptor is
// closed and no later Open serves the file.
func TestPurgesCloseKeptDescriptorsAndLaterHitsMiss(t *testing.T) {
	tests := map[string]func(s *Store, key string, ref entry.BodyFile){
		"RemoveKey": func(s *Store, key string, _ entry.BodyFile) { s.RemoveKey(key) },
		"RemoveMatching": func(s *Store, key string, _ entry.BodyFile) {
			s.RemoveMatching(func(e *entry.Entry) bool { return e.Target == key })
		},
		"Remove": func(s *Store, _ string, ref entry.BodyFile) { s.Remove(ref.ID) },
	}
	for name, purge := range tests {
		t.Run(name, func(t *testing.T) {
			s, _ := testStore(t, Options{})
			ref := put(t, s, "GET h/a", body(4, 70<<10), 70<<10)
			keep := put(t, s, "GET h/b", body(5, 70<<10), 70<<10)
			read(t, s, "GET h/a", ref)
			read(t, s, "GET h/b", keep)
			if n := descriptorsOf(t, s); n != 2 {
				t.Fatalf("%d descriptors kept, want 2", n)
			}
			purge(s, "GET h/a", ref)
			if n := descriptorsOf(t, s); n != 1 {
				t.Fatalf("%d descriptors after the purge, want /b's alone", n)
			}
			if b, err := s.Open("GET h/a", ref); !errors.Is(err, fs.ErrNotExist) {
				if err == nil {
					_ = b.Close()
				}
				t.Fatalf("Open after the purge = %v, want fs.ErrNotExist", err)
			}
			if got := read(t, s, "GET h/b", keep); !bytes.Equal(got, body(5, 70<<10)) {
				t.Fatal("the body left reads wrong")
			}
		})
	}
}

// TestASectionIsServedOverTLSAndHTTP2WithRead: a connection that is not
// connguard's (TLS, HTTP/2) has no ReadFrom for a region: the section is
// copied with Read (pread), exact.
func TestASectionIsServedOverTLSAndHTTP2WithRead(t *testing.T) {
	s, _ := testStore(t, Options{})
	want := body(6, 1<<20+3)
	ref := put(t, s, "GET h/a", want, int64(len(want)))
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := s.Open("GET h/a", ref)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		defer b.Close()
		w.Header().Set("Content-Length", strconv.FormatInt(ref.Size-100, 10))
		_, _ = io.Copy(w, b.Section(100, ref.Size-100))
	}))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	defer srv.Close()
	for _, h2 := range []bool{false, true} {
		tr := srv.Client().Transport.(*http.Transport).Clone()
		tr.ForceAttemptHTTP2 = h2
		if !h2 {
			tr.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
			tr.TLSClientConfig.NextProtos = []string{"http/1.1"}
		}
		c := &http.Client{Transport: tr, Timeout: 30 * time.Second}
		resp, err := c.Get(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		tr.CloseIdleConnections()
		if err != nil || resp.ProtoMajor != map[bool]int{false: 1, true: 2}[h2] || !bytes.Equal(got, want[100:]) {
			t.Fatalf("HTTP/%d: %d bytes (%v), want the body from 100 on", resp.ProtoMajor, len(got), err)
		}
	}
}
