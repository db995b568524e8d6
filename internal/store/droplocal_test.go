package store

import (
	"testing"
	"time"

	"github.com/tiercache/tiercache/internal/entry"
	"github.com/tiercache/tiercache/test/testredis"
)

// withFile is e with its body in file id (and in chunks chunks of L2).
func withFile(e *entry.Entry, id byte, chunks uint32) *entry.Entry {
	e.Body = nil
	e.File = &entry.BodyFile{ID: [16]byte{id}, Size: 1 << 20, CRC: 7, Chunks: chunks}
	return e
}

// A body file gone on one replica says nothing about the shared tier:
// DropLocal forgets the entry in L1 only, and only the entry that refers
// to that very file, never a newer one stored meanwhile.
func TestDropLocalForgetsOnlyThisReplicasEntryOfThatBody(t *testing.T) {
	srv := testredis.Start(t)
	ctx := testCtx(t)
	rc := rawClient(t, srv.Addr())
	f := newFixture(t, storeOpts{addr: srv.Addr()})
	now := time.Now()
	key := keyFor("/big")

	// This replica's fill (Chunks 0 in L1) and the copy it shared in L2.
	mustSet(t, f.s, key, withFile(response(now, "/big", time.Hour), 1, 0))
	if err := f.l2.Set(ctx, key, withFile(response(now, "/big", time.Hour), 1, 1), time.Hour); err != nil {
		t.Fatal(err)
	}

	f.s.DropLocal(key, [16]byte{2})
	if _, err := f.l1.Get(key); err != nil {
		t.Fatalf("DropLocal of another body removed the entry from L1: %v", err)
	}

	f.s.DropLocal(key, [16]byte{1})
	if _, err := f.l1.Get(key); err == nil {
		t.Fatal("DropLocal of the entry's own body left it in L1")
	}
	if !inL2(t, rc, testPrefix(t), key) {
		t.Fatal("DropLocal deleted the shared entry from L2")
	}
	// The next lookup finds L2's entry, with its chunks.
	var e entry.Entry
	layer, err := f.s.Get(ctx, key, &e)
	if err != nil || layer != LayerL2 || e.File == nil || e.File.ID != [16]byte{1} || e.File.Chunks != 1 {
		t.Fatalf("Get after DropLocal: layer %q, file %+v, %v; want L2's entry with its chunk", layer, e.File, err)
	}

	// A refresh stored a newer entry, with a body of its own: a request
	// that found the old body's file gone must not remove it.
	mustSet(t, f.s, key, withFile(response(now.Add(time.Minute), "/big", time.Hour), 3, 0))
	f.s.DropLocal(key, [16]byte{1})
	got, err := f.l1.Get(key)
	if err != nil || got.File == nil || got.File.ID != [16]byte{3} {
		t.Fatalf("the newer entry after DropLocal of the old body: %+v, %v", got.File, err)
	}
}
