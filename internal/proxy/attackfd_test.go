package proxy

import (
	"bytes"
	"net/url"
	"testing"

	"github.com/tiercache/tiercache/internal/bodystore"
)

// Attacks on the body files' kept descriptors (bodystore handle.go) and
// on what the hit path hands the body store.

// TestATTACK_AnEntryNamingAnotherKeysFileIsNeverServedItAfterAHit: the
// hit path opens body files with the key of its pooled key buffer
// (kb.Key() aliases the buffer the next request builds its key in). An
// entry under /b that names /a's file (a reference crossed by a bug or
// written by a peer with the tier's Redis ACL) is refused by the file's
// header check, and must stay refused once /a's hits keep its
// descriptor: the check must not compare /b's key with itself.
func TestATTACK_AnEntryNamingAnotherKeysFileIsNeverServedItAfterAHit(t *testing.T) {
	f := newFileFixture(t, "", newOrigin(t, bodies(fileSize)), bodystore.Options{})
	wantA, wantB := bodyFor("/a", fileSize), bodyFor("/b", fileSize)
	expectBody(t, f.get("/a"), 200, "MISS", wantA)
	a := f.waitStored(t, "/a")
	expectBody(t, f.get("/b"), 200, "MISS", wantB)
	f.waitStored(t, "/b")
	// /a's hits keep its descriptor.
	for range 3 {
		expectBody(t, f.get("/a"), 200, "HIT; layer=l1", wantA)
	}
	u, err := url.Parse(f.srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	keyB := keyOf(f.fixture, u.Host, "/b")
	if err := f.cache.Set(keyB, a); err != nil {
		t.Fatal(err)
	}
	// Each request (and keyOf) builds /b's key in a pooled buffer, the
	// one /a's hits used among them.
	for i := range 20 {
		r := f.get("/b")
		if bytes.Equal([]byte(r.body), wantA) {
			t.Fatalf("request %d for /b was sent /a's body (%d %q)", i, r.status, r.xcache())
		}
		expectBody(t, r, 200, "MISS", wantB)
		if err := f.cache.Set(keyOf(f.fixture, u.Host, "/b"), a); err != nil {
			t.Fatal(err)
		}
	}
}
