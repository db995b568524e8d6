package bodystore

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/tiercache/tiercache/internal/entry"
	"github.com/tiercache/tiercache/internal/metrics"
)

// pieceMeta is the entry a proxy records with a piece file: the partial
// response of host/target with one piece, the bytes [start, start+n-1]
// of a representation of length bytes, which are this whole body.
func pieceMeta(host, target string, start, length int64, tags ...string) func(entry.BodyFile) []byte {
	return func(ref entry.BodyFile) []byte {
		return entry.Encode(nil, &entry.Entry{
			Kind: entry.KindPartial, Host: host, Target: target, Tags: tags, Status: 200,
			ResponseTime: time.Unix(1700000000, 0).UTC(), Lifetime: time.Hour,
			Partial: &entry.Partial{Length: length, Pieces: []entry.Piece{{
				Span: entry.Span{Start: start, End: start + ref.Size - 1}, File: ref,
			}}},
		})
	}
}

// putPiece stores b as a piece of key.
func putPiece(t *testing.T, s *Store, key string, b []byte, meta func(entry.BodyFile) []byte) entry.BodyFile {
	t.Helper()
	w, err := s.Create(key, int64(len(b)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(b); err != nil {
		t.Fatal(err)
	}
	ref, err := w.Commit(meta)
	if err != nil {
		t.Fatalf("Commit of a piece: %v", err)
	}
	return ref
}

// A piece file is a body like any other while the store runs: opened,
// verified and read by its reference.
func TestAPieceIsStoredAndReadLikeABody(t *testing.T) {
	s, _ := testStore(t, Options{})
	b := body(7, 3000)
	ref := putPiece(t, s, "GET http://h/v", b, pieceMeta("h", "/v", 1000, 1<<20))
	if got := read(t, s, "GET http://h/v", ref); !bytes.Equal(got, b) {
		t.Fatal("the piece reads back different")
	}
}

// Commit refuses a piece entry that does not describe exactly this body:
// another file, a span shorter than the body, two pieces.
func TestCommitRefusesAPieceEntryThatIsNotThisBody(t *testing.T) {
	tests := []struct {
		name string
		edit func(e *entry.Entry)
	}{
		{"a piece in another file", func(e *entry.Entry) { e.Partial.Pieces[0].File.ID[0] ^= 1 }},
		{"a piece holding less than the body", func(e *entry.Entry) {
			e.Partial.Pieces[0].End--
		}},
		{"a piece from inside the body", func(e *entry.Entry) {
			e.Partial.Pieces[0].Offset, e.Partial.Pieces[0].End = 1, e.Partial.Pieces[0].End-1
		}},
		{"two pieces", func(e *entry.Entry) {
			pc := e.Partial.Pieces[0]
			pc.Start, pc.End = pc.End+1, pc.End+1
			pc.File.Size = 1
			e.Partial.Pieces = append(e.Partial.Pieces, pc)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, _ := testStore(t, Options{})
			w, err := s.Create("GET http://h/v", 100)
			must(t, err)
			_, err = w.Write(body(1, 100))
			must(t, err)
			_, err = w.Commit(func(ref entry.BodyFile) []byte {
				var e entry.Entry
				must(t, entry.Decode(pieceMeta("h", "/v", 0, 1000)(ref), &e))
				tt.edit(&e)
				return entry.Encode(nil, &e)
			})
			if !errors.Is(err, ErrMismatch) {
				t.Fatalf("Commit = %v, want ErrMismatch", err)
			}
			if names := files(t, s.dir); len(names) != 0 {
				t.Fatalf("a refused commit left %q", names)
			}
		})
	}
}

// The restart scan never returns a piece file, which a caller would put
// back into L1 as the complete response of its key: parts live in L1
// only, which is empty after a restart, so pieces are orphans and are
// removed, uncounted as errors. Complete bodies beside them are kept.
func TestRestartRemovesPieceFiles(t *testing.T) {
	s, _ := testStore(t, Options{})
	whole := put(t, s, "GET http://h/whole", body(1, 5000), 5000)
	p1 := putPiece(t, s, "GET http://h/v", body(2, 4000), pieceMeta("h", "/v", 0, 1<<20))
	p2 := putPiece(t, s, "GET http://h/v", body(3, 4000), pieceMeta("h", "/v", 8000, 1<<20))

	_, rec, m := reopen(t, s, 64<<20)
	if got := recoveredKeys(rec); !slices.Equal(got, []string{"GET http://h/whole"}) {
		t.Fatalf("recovered %q, want the complete body alone", got)
	}
	var e entry.Entry
	must(t, entry.Decode(rec[0].Entry, &e))
	if e.File == nil || *e.File != whole {
		t.Fatalf("recovered %+v, want %+v", e.File, whole)
	}
	for _, ref := range []entry.BodyFile{p1, p2} {
		if _, err := os.Stat(filepath.Join(s.dir, fileName(ref.ID, bodySuffix))); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("a piece file survived the restart: %v", err)
		}
	}
	if got := errorsCounted(t, m, metrics.BodyOpRecover); got != 0 {
		t.Fatalf("removing piece files counted %v recover errors", got)
	}
}

// Purges find piece files by their key and identity like any body
// (RemoveKey, RemoveMatching, which shows them as KindPartial), and a
// soft purge leaves them alone: they never come back after a restart.
func TestPurgesFindPieceFiles(t *testing.T) {
	s, _ := testStore(t, Options{})
	k := "GET http://h/v"
	p1 := putPiece(t, s, k, body(2, 1000), pieceMeta("h", "/v", 0, 1<<20, "vid"))
	p2 := putPiece(t, s, k, body(3, 1000), pieceMeta("h", "/v", 5000, 1<<20, "vid"))
	other := put(t, s, "GET http://h/o", body(4, 1000), 1000)

	if n := s.ExpireMatching(time.Unix(1700000100, 0), func(*entry.Entry) bool { return true }); n != 1 {
		t.Fatalf("a soft purge of everything concerned %d bodies, want the complete one alone", n)
	}
	var kinds []entry.Kind
	n := s.RemoveMatching(func(e *entry.Entry) bool {
		if slices.Contains(e.Tags, "vid") {
			kinds = append(kinds, e.Kind)
			return e.File.ID == p1.ID
		}
		return false
	})
	if n != 1 || !slices.Equal(kinds, []entry.Kind{entry.KindPartial, entry.KindPartial}) {
		t.Fatalf("RemoveMatching removed %d and saw kinds %v, want 1 of two KindPartial", n, kinds)
	}
	s.RemoveKey(k)
	for _, ref := range []entry.BodyFile{p1, p2} {
		if _, err := s.Open(k, ref); err == nil {
			t.Fatalf("piece %x is still there", ref.ID)
		}
	}
	if got := read(t, s, "GET http://h/o", other); len(got) != 1000 {
		t.Fatal("another key's body went with the pieces")
	}
}
