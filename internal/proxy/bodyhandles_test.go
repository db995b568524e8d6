package proxy

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/url"
	"testing"
	"unsafe"

	"github.com/tiercache/tiercache/internal/bodystore"
	"github.com/tiercache/tiercache/test/testredis"
)

// Attacks on the body files' kept descriptors (bodystore handle.go) and
// on what the hit path hands the body store.

// TestAnEntryNamingAnotherKeysFileIsNeverServedItAfterAHit: the
// hit path opens body files with the key of its pooled key buffer
// (kb.Key() aliases the buffer the next request builds its key in). An
// entry under /b that names /a's file (a reference crossed by a bug or
// written by a peer with the tier's Redis ACL) is refused by the file's
// header check, and must stay refused once /a's hits keep its
// descriptor: the check must not compare /b's key with itself.
func TestAnEntryNamingAnotherKeysFileIsNeverServedItAfterAHit(t *testing.T) {
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

// TestACopyFromL2ThatOutlivesItsRequestKeepsTheRequestsKey: a
// request whose body is copied from L2 (openShared) may leave before the
// copy, which it started and which runs on, has created its file: a
// client that gives up, or one that disconnects on purpose. Its key
// aliases its pooled key buffer, which the next request overwrites. The
// copy must write the file for the key it was started for: a file written
// under the next request's key is never served for its own (every hit
// refetches from the origin), and at the next start it is put back into
// L1 under that other key: /y would be served /x's body.
func TestACopyFromL2ThatOutlivesItsRequestKeepsTheRequestsKey(t *testing.T) {
	srv := testredis.Start(t)
	rc := rawRedis(t, srv.Addr())
	const size = 1 << 20
	o := newOrigin(t, bodies(size))
	a, _ := bodyReplica(t, srv.Addr(), o)
	b, bdir := bodyReplica(t, srv.Addr(), o)
	wantX := bodyFor("/x", size)
	expectBody(t, a.get("/x", "Host", "shop"), 200, "MISS", wantX)
	waitFor(t, func() bool { c, e := chunksAndEntries(t, rc); return c == 1 && e == 1 }, "/x's chunk and entry in L2")
	keyX, keyY := keyOf(b, "shop", "/x"), keyOf(b, "shop", "/y")
	if len(keyX) != len(keyY) {
		t.Fatalf("keys of different lengths: %q, %q", keyX, keyY)
	}
	e, err := tierL2(t, srv.Addr()).Get(t.Context(), keyX)
	if err != nil || e.File == nil || e.File.Chunks == 0 {
		t.Fatalf("/x's entry in L2: %+v, %v", e.File, err)
	}

	// Every copy slot is taken: the copy waits for one while its request
	// leaves (its context is over).
	for range maxBodyCopies {
		b.px.copySlots <- struct{}{}
	}
	buf := []byte(keyX) // the request's pooled key buffer
	gone, cancel := context.WithCancel(t.Context())
	cancel()
	if body, st := b.px.openShared(gone, unsafe.String(&buf[0], len(buf)), &e); st == bodyOpened {
		_ = body.Close()
		t.Fatal("a request that has left was served")
	}
	copy(buf, keyY) // the next request builds its key in the buffer
	<-b.px.copySlots

	// A request for /x now waits for that copy (one per body id) and is
	// served from its file.
	body, st := b.px.openShared(t.Context(), keyX, &e)
	if st != bodyOpened {
		t.Fatal("the file the copy wrote is not /x's: /x is a miss")
	}
	got, err := io.ReadAll(body.Section(0, body.Size()))
	_ = body.Close()
	if err != nil || !bytes.Equal(got, wantX) {
		t.Fatalf("read %d bytes (%v), want /x's body", len(got), err)
	}
	for range maxBodyCopies - 1 {
		<-b.px.copySlots
	}
	// What a restart would put back into L1.
	again, rec, err := bodystore.Open(t.Context(), bodystore.Options{Dir: bdir, MaxBytes: 1 << 30, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	_ = again.Close()
	if len(rec) != 1 || rec[0].Key != keyX {
		keys := make([]string, len(rec))
		for i := range rec {
			keys[i] = rec[i].Key
		}
		t.Fatalf("a restart recovers the copied body under %q, want %q alone", keys, keyX)
	}
}
