package bodystore

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tiercache/tiercache/internal/entry"
	"github.com/tiercache/tiercache/internal/metrics"
)

// TestACreateThatCannotOpenItsFileEvictsNothing: a full store, and a
// Create whose temp file cannot be created (here the real open refuses a
// name already taken, O_EXCL: EEXIST; under a flood of connections it is
// EMFILE, internal/proxy's TestOutOfDescriptorsAFillIntoAFullStoreEvictsNothing).
// The fill serves its client from the origin stream; the store must not
// have evicted valid bodies to make room for a file it never had, nor keep
// anything reserved.
func TestACreateThatCannotOpenItsFileEvictsNothing(t *testing.T) {
	const n = 300 << 10
	keys := []string{"GET h/a", "GET h/b", "GET h/c"}
	// Room for three files, not four.
	s, m := testStore(t, Options{MaxBytes: 3*fileSize("GET h/a", n) + 1000})
	refs := map[string]entry.BodyFile{}
	for i, k := range keys {
		refs[k] = put(t, s, k, body(uint64(i), n), n)
	}
	committed, nfiles, _ := s.Usage()

	id := [16]byte{0xee, 1}
	stray := filepath.Join(s.dir, fileName(id, tmpSuffix))
	must(t, os.WriteFile(stray, []byte("not ours"), 0o600))
	if w, err := s.CreateWithID(id, "GET h/new", n); !errors.Is(err, ErrExists) {
		if err == nil {
			w.Abort()
		}
		t.Fatalf("CreateWithID over a taken temp name = %v, want ErrExists", err)
	}

	if got := testutil.ToFloat64(m.BodyStoreEvictions); got != 0 {
		t.Errorf("evictions_total = %v after a Create that never had a file, want 0", got)
	}
	if c, f, r := s.Usage(); c != committed || f != nfiles || r != 0 {
		t.Errorf("usage %d bytes in %d files, %d reserved; want %d in %d, none reserved", c, f, r, committed, nfiles)
	}
	for i, k := range keys {
		if got := read(t, s, k, refs[k]); !bytes.Equal(got, body(uint64(i), n)) {
			t.Errorf("%s reads %d bytes that differ from those stored", k, len(got))
		}
	}
	want := []string{fileName(id, tmpSuffix)}
	for _, k := range keys {
		want = append(want, fileName(refs[k].ID, bodySuffix))
	}
	slices.Sort(want)
	if got := files(t, s.dir); !slices.Equal(got, want) {
		t.Errorf("files %q, want the three bodies and the stray file, untouched", got)
	}
	// The room is there for a fill that has its file: one body goes.
	put(t, s, "GET h/new", body(9, n), n)
	if got := testutil.ToFloat64(m.BodyStoreEvictions); got != 1 {
		t.Errorf("evictions_total = %v after a fill into the full store, want 1", got)
	}
}

// TestACreateRefusedOnceItHasItsFileRemovesIt: the store is checked again
// once a Create has its file, since it may have changed meanwhile; a
// Create refused then removes its file, reserves nothing and evicts
// nothing.
func TestACreateRefusedOnceItHasItsFileRemovesIt(t *testing.T) {
	const budget = 1 << 20
	tests := map[string]struct {
		meanwhile func(t *testing.T, s *Store) (cleanup func())
		want      error
		reserved  int64
	}{
		"another fill took the room": {
			meanwhile: func(t *testing.T, s *Store) func() {
				w, err := s.Create("GET h/busy", 600<<10)
				if err != nil {
					t.Fatal(err)
				}
				return w.Abort
			},
			want: ErrFull, reserved: headerSize + 600<<10,
		},
		"the store was closed": {
			meanwhile: func(t *testing.T, s *Store) func() { must(t, s.Close()); return func() {} },
			want:      ErrClosed,
		},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			s, m := testStore(t, Options{MaxBytes: budget})
			old := put(t, s, "GET h/old", body(1, 300<<10), 300<<10)
			committed, _, _ := s.Usage()
			creates := errorsCounted(t, m, metrics.BodyOpCreate)
			var tmp []string
			cleanup := func() {}
			s.opened = func() {
				s.opened = nil // the fill made meanwhile opens its own
				tmp, _ = filepath.Glob(filepath.Join(s.dir, "*"+tmpSuffix))
				cleanup = tt.meanwhile(t, s)
			}
			// 500 KiB fit beside the old body, not beside the busy fill.
			if w, err := s.Create("GET h/new", 500<<10); !errors.Is(err, tt.want) {
				if err == nil {
					w.Abort()
				}
				t.Fatalf("Create = %v, want %v", err, tt.want)
			}
			if len(tmp) != 1 {
				t.Fatalf("temp files once the Create had its file: %q, want its own", tmp)
			}
			if _, err := os.Stat(tmp[0]); !errors.Is(err, fs.ErrNotExist) {
				t.Fatalf("the refused Create's file: %v, want it removed", err)
			}
			if c, n, r := s.Usage(); c != committed || n != 1 || r != tt.reserved {
				t.Fatalf("usage %d bytes in %d files, %d reserved; want %d in 1, %d reserved", c, n, r, committed, tt.reserved)
			}
			if got := testutil.ToFloat64(m.BodyStoreEvictions); got != 0 {
				t.Fatalf("evictions_total = %v, want 0", got)
			}
			wantErrs := creates
			if tt.want == ErrFull {
				wantErrs++
			}
			if got := errorsCounted(t, m, metrics.BodyOpCreate); got != wantErrs {
				t.Fatalf("errors_total{op=create} = %v, want %v", got, wantErrs)
			}
			cleanup()
			if got := read(t, s, "GET h/old", old); !bytes.Equal(got, body(1, 300<<10)) {
				t.Fatal("the old body changed")
			}
		})
	}
}
