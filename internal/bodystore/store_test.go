package bodystore

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tiercache/tiercache/internal/entry"
	"github.com/tiercache/tiercache/internal/metrics"
)

// testStore opens a store in a fresh directory with metrics of its own.
func testStore(t *testing.T, o Options) (*Store, *testMetrics) {
	t.Helper()
	if o.Dir == "" {
		o.Dir = t.TempDir()
	}
	if o.MaxBytes == 0 {
		o.MaxBytes = 64 << 20
	}
	m := newTestMetrics(t)
	o.Metrics = m.Metrics
	o.Logger = slog.New(slog.DiscardHandler)
	s, rec, err := Open(t.Context(), o)
	if err != nil {
		t.Fatal(err)
	}
	if len(rec) != 0 {
		t.Fatalf("a fresh directory recovered %d bodies", len(rec))
	}
	t.Cleanup(func() { _ = s.Close() })
	return s, m
}

// testMetrics is a Metrics with its own registry, to read counters back.
type testMetrics struct {
	*metrics.Metrics
	reg *prometheus.Registry
}

func newTestMetrics(t *testing.T) *testMetrics {
	t.Helper()
	reg := prometheus.NewRegistry()
	m, err := metrics.New(reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	return &testMetrics{Metrics: m, reg: reg}
}

// errorsCounted reads tiercache_body_store_errors_total{op}.
func errorsCounted(t *testing.T, m *testMetrics, op string) float64 {
	t.Helper()
	mfs, err := m.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "tiercache_body_store_errors_total" {
			continue
		}
		for _, mt := range mf.GetMetric() {
			for _, l := range mt.GetLabel() {
				if l.GetName() == "op" && l.GetValue() == op {
					return mt.GetCounter().GetValue()
				}
			}
		}
	}
	t.Fatalf("no tiercache_body_store_errors_total{op=%q}", op)
	return 0
}

// body returns n bytes that differ from any other call's.
func body(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, n2u(n)))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func n2u(n int) uint64 { return uint64(n) }

// meta is the entry a proxy would store for a body in a file.
func meta(key string) func(entry.BodyFile) []byte {
	return func(ref entry.BodyFile) []byte {
		e := &entry.Entry{
			Kind: entry.KindResponse, Host: "h", Target: key, Status: 200,
			Header:       []entry.Field{{Name: "Content-Type", Value: "application/octet-stream"}},
			ResponseTime: time.Unix(1700000000, 0).UTC(), Lifetime: time.Hour,
			File: &ref,
		}
		return entry.Encode(nil, e)
	}
}

// put stores b under key and returns its reference.
func put(t *testing.T, s *Store, key string, b []byte, hint int64) entry.BodyFile {
	t.Helper()
	w, err := s.Create(key, hint)
	if err != nil {
		t.Fatalf("Create(%q): %v", key, err)
	}
	for p := b; len(p) > 0; {
		n := min(len(p), 100<<10)
		if _, err := w.Write(p[:n]); err != nil {
			t.Fatalf("Write: %v", err)
		}
		p = p[n:]
	}
	ref, err := w.Commit(meta(key))
	if err != nil {
		t.Fatalf("Commit: %v", err)
	}
	return ref
}

// read returns the whole body ref names for key.
func read(t *testing.T, s *Store, key string, ref entry.BodyFile) []byte {
	t.Helper()
	b, err := s.Open(key, ref)
	if err != nil {
		t.Fatalf("Open(%q): %v", key, err)
	}
	defer b.Close()
	got, err := io.ReadAll(b.Section(0, ref.Size))
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// files lists the directory's names.
func files(t *testing.T, dir string) []string {
	t.Helper()
	des, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, de := range des {
		out = append(out, de.Name())
	}
	return out
}

func TestStoreAndServe(t *testing.T) {
	for _, hint := range []int64{-1, 0} {
		s, _ := testStore(t, Options{})
		want := body(1, 300<<10)
		h := hint
		if hint == 0 {
			h = int64(len(want))
		}
		ref := put(t, s, "GET h/a", want, h)
		if ref.Size != int64(len(want)) || ref.Chunks != 0 {
			t.Fatalf("ref = %+v", ref)
		}
		if got := read(t, s, "GET h/a", ref); !bytes.Equal(got, want) {
			t.Fatalf("hint %d: read %d bytes that differ from the %d written", h, len(got), len(want))
		}
		committed, n, reserved := s.Usage()
		if n != 1 || reserved != 0 || committed <= int64(len(want)) {
			t.Fatalf("hint %d: usage %d bytes, %d files, %d reserved", h, committed, n, reserved)
		}
	}
}

// fileSize is the size of the file holding a body of n bytes stored by put
// under key.
func fileSize(key string, n int) int64 {
	enc := meta(key)(entry.BodyFile{})
	return headerSize + int64(n) + 4 + int64(len(key)) + int64(len(enc)) + tailSize
}

func TestEvictionTakesTheLeastRecentlyUsed(t *testing.T) {
	const n = 300 << 10
	// Room for three files, not four.
	s, m := testStore(t, Options{MaxBytes: 3*fileSize("GET h/a", n) + 1000})
	refs := map[string]entry.BodyFile{}
	for i, k := range []string{"GET h/a", "GET h/b", "GET h/c"} {
		refs[k] = put(t, s, k, body(uint64(i), n), n)
	}
	_ = read(t, s, "GET h/a", refs["GET h/a"]) // a is now used more recently than b
	refs["GET h/d"] = put(t, s, "GET h/d", body(9, n), n)

	if _, err := s.Open("GET h/b", refs["GET h/b"]); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Open of the least recently used body = %v, want it evicted (fs.ErrNotExist)", err)
	}
	for _, k := range []string{"GET h/a", "GET h/c", "GET h/d"} {
		_ = read(t, s, k, refs[k])
	}
	if got := testutil.ToFloat64(m.BodyStoreEvictions); got != 1 {
		t.Errorf("evictions_total = %v, want 1", got)
	}
	committed, files, _ := s.Usage()
	if files != 3 || committed != 3*fileSize("GET h/a", n) {
		t.Errorf("usage %d bytes in %d files, want %d in 3", committed, files, 3*fileSize("GET h/a", n))
	}
	if got := testutil.ToFloat64(m.BodyStoreBytes); got != float64(committed) {
		t.Errorf("body_store_bytes = %v, want %d", got, committed)
	}
	if got := testutil.ToFloat64(m.BodyStoreFiles); got != 3 {
		t.Errorf("body_store_files = %v, want 3", got)
	}
}

func TestCreateDecisions(t *testing.T) {
	const budget = 1 << 20
	tests := map[string]struct {
		maxObject int64
		busy      int64 // a fill in progress reserving this much (with a hint)
		stored    int   // a committed body of this size
		hint      int64
		want      error
		evicted   bool
	}{
		"a body that fits is reserved":                                 {hint: 500 << 10},
		"a body above the per-object maximum is too large":             {hint: 700 << 10, want: ErrTooLarge},
		"a body above the whole budget is refused without evicting":    {maxObject: 2 * budget, stored: 1000, hint: budget, want: ErrFull},
		"a committed body is evicted to make room":                     {stored: 600 << 10, hint: 500 << 10, evicted: true},
		"a fill in progress is never evicted, so the budget is full":   {busy: 600 << 10, hint: 500 << 10, want: ErrFull},
		"a body that cannot fit even in an empty store evicts nothing": {busy: 600 << 10, stored: 300 << 10, hint: 500 << 10, want: ErrFull},
		"an unknown size reserves as it goes":                          {busy: 600 << 10, hint: -1},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			s, _ := testStore(t, Options{MaxBytes: budget, MaxObject: cmp.Or(tt.maxObject, 600<<10)})
			if tt.busy > 0 {
				w, err := s.Create("GET h/busy", tt.busy)
				if err != nil {
					t.Fatal(err)
				}
				defer w.Abort()
			}
			var ref entry.BodyFile
			if tt.stored > 0 {
				ref = put(t, s, "GET h/old", body(1, tt.stored), int64(tt.stored))
			}
			w, err := s.Create("GET h/new", tt.hint)
			if !errors.Is(err, tt.want) {
				t.Fatalf("Create = %v, want %v", err, tt.want)
			}
			if err == nil {
				w.Abort()
			}
			if tt.stored > 0 {
				_, err := s.Open("GET h/old", ref)
				if evicted := errors.Is(err, fs.ErrNotExist); evicted != tt.evicted {
					t.Fatalf("old body evicted: %v, want %v (%v)", evicted, tt.evicted, err)
				}
			}
			wantReserved := int64(0)
			if tt.busy > 0 {
				wantReserved = headerSize + tt.busy
			}
			if _, _, reserved := s.Usage(); reserved != wantReserved {
				t.Fatalf("%d bytes reserved after the new fill ended, want %d", reserved, wantReserved)
			}
			// The busy fill's temp file and the old body unless evicted:
			// a refused Create leaves no file of its own.
			wantFiles := 0
			if tt.busy > 0 {
				wantFiles++
			}
			if tt.stored > 0 && !tt.evicted {
				wantFiles++
			}
			if names := files(t, s.dir); len(names) != wantFiles {
				t.Fatalf("files after the new fill ended: %q, want %d", names, wantFiles)
			}
		})
	}
}

func TestAnUnknownSizeStopsAtTheBudget(t *testing.T) {
	s, m := testStore(t, Options{MaxBytes: 3 << 20})
	busy, err := s.Create("GET h/busy", 2<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Abort()
	w, err := s.Create("GET h/grow", -1)
	if err != nil {
		t.Fatal(err)
	}
	chunk := body(1, 256<<10)
	var werr error
	for range 8 { // 2 MiB: more than the 1 MiB left
		if _, werr = w.Write(chunk); werr != nil {
			break
		}
	}
	if !errors.Is(werr, ErrFull) {
		t.Fatalf("writing past the budget = %v, want ErrFull", werr)
	}
	if _, err := w.Write(chunk); !errors.Is(err, ErrFull) {
		t.Fatalf("a write after the writer broke = %v, want the same ErrFull", err)
	}
	if _, err := w.Commit(meta("GET h/grow")); !errors.Is(err, ErrFull) {
		t.Fatalf("Commit of a broken writer = %v, want ErrFull", err)
	}
	_, files, reserved := s.Usage()
	if files != 0 || reserved != headerSize+2<<20 {
		t.Fatalf("after the failed fill: %d files, %d reserved; want 0 and only the busy fill's %d", files, reserved, headerSize+2<<20)
	}
	if got := errorsCounted(t, m, metrics.BodyOpWrite); got != 1 {
		t.Errorf("errors_total{op=write} = %v, want 1", got)
	}
}

func TestCreateWithIDRefusesAnIDItHas(t *testing.T) {
	s, _ := testStore(t, Options{})
	ref := put(t, s, "GET h/a", body(1, 1000), 1000)
	if _, err := s.CreateWithID(ref.ID, "GET h/a", 1000); !errors.Is(err, ErrExists) {
		t.Fatalf("CreateWithID of a committed id = %v, want ErrExists", err)
	}
	id := [16]byte{7}
	w, err := s.CreateWithID(id, "GET h/b", 5)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateWithID(id, "GET h/b", 5); !errors.Is(err, ErrExists) {
		t.Fatalf("CreateWithID of an id being written = %v, want ErrExists", err)
	}
	if _, err := w.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	got, err := w.Commit(meta("GET h/b"))
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != id {
		t.Fatalf("committed id %x, want %x", got.ID, id)
	}
	if b := read(t, s, "GET h/b", got); string(b) != "hello" {
		t.Fatalf("read %q", b)
	}
}

func TestRemoveDeletesButOpenReadersFinish(t *testing.T) {
	s, _ := testStore(t, Options{})
	want := body(3, 200<<10)
	ref := put(t, s, "GET h/a", want, int64(len(want)))
	b, err := s.Open("GET h/a", ref)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	s.Remove(ref.ID)
	if names := files(t, s.dir); len(names) != 0 {
		t.Fatalf("files left after Remove: %q", names)
	}
	if committed, n, _ := s.Usage(); committed != 0 || n != 0 {
		t.Fatalf("usage after Remove: %d bytes, %d files", committed, n)
	}
	got, err := io.ReadAll(b.Section(0, ref.Size))
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("a reader opened before Remove got %d bytes, %v", len(got), err)
	}
	if _, err := s.Open("GET h/a", ref); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Open after Remove = %v, want fs.ErrNotExist", err)
	}
}

func TestFilesDeletedUnderTheStore(t *testing.T) {
	const n = 300 << 10
	s, m := testStore(t, Options{MaxBytes: 3*fileSize("GET h/0", n) + 100})
	var refs []entry.BodyFile
	for i := range 3 {
		refs = append(refs, put(t, s, "GET h/"+string(rune('0'+i)), body(uint64(i), n), n))
	}
	// Someone empties the directory.
	for _, name := range files(t, s.dir) {
		if err := os.Remove(filepath.Join(s.dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	// Open of a deleted file fails cleanly and the index forgets it.
	if _, err := s.Open("GET h/0", refs[0]); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Open of a deleted file = %v, want fs.ErrNotExist", err)
	}
	if _, files, _ := s.Usage(); files != 2 {
		t.Fatalf("index has %d files after a failed Open, want 2", files)
	}
	if got := errorsCounted(t, m, metrics.BodyOpOpen); got != 1 {
		t.Errorf("errors_total{op=open} = %v, want 1", got)
	}
	// The other two are still counted; a body needing all the room
	// evicts them (already gone), and their bytes leave the budget.
	want := body(7, 3*n)
	ref := put(t, s, "GET h/big", want, int64(len(want)))
	if got := read(t, s, "GET h/big", ref); !bytes.Equal(got, want) {
		t.Fatal("the new body reads back different")
	}
	if committed, files, _ := s.Usage(); files != 1 || committed != fileSize("GET h/big", 3*n) {
		t.Fatalf("usage %d bytes in %d files, want only the new body", committed, files)
	}
}

// TestConcurrentUseKeepsTheBudget runs fills, followers, hits and removes
// (by id, key and match) at once under a budget that forces evictions, then checks the books:
// what the index counts is what is on disk, and nothing stays reserved.
func TestConcurrentUseKeepsTheBudget(t *testing.T) {
	const n = 200 << 10
	s, _ := testStore(t, Options{MaxBytes: 5 * fileSize("GET h/0-0", n)})
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for g := range 4 {
		wg.Go(func() {
			for i := range 25 {
				key := fmt.Sprintf("GET h/%d-%d", g, i)
				want := body(uint64(g*100+i), n)
				w, err := s.Create(key, -1)
				if errors.Is(err, ErrFull) {
					continue // all the room is held by other fills
				}
				if err != nil {
					errs <- err
					return
				}
				f := w.Follow()
				got := readAllAsync(f)
				for p := want; len(p) > 0; p = p[min(len(p), 50<<10):] {
					if _, err := w.Write(p[:min(len(p), 50<<10)]); err != nil {
						break // ErrFull: the fill is abandoned
					}
				}
				ref, err := w.Commit(meta(key))
				r := <-got
				_ = f.Close()
				if err != nil {
					if !errors.Is(r.err, ErrAborted) {
						errs <- fmt.Errorf("%s: a follower of a failed fill got %v", key, r.err)
						return
					}
					continue
				}
				if r.err != nil || !bytes.Equal(r.b, want) {
					errs <- fmt.Errorf("%s: follower read %d bytes, %v", key, len(r.b), r.err)
					return
				}
				if b, err := s.Open(key, ref); err == nil {
					got, err := io.ReadAll(b.Section(0, ref.Size))
					_ = b.Close()
					if err != nil || !bytes.Equal(got, want) {
						errs <- fmt.Errorf("%s: hit read %d bytes, %v", key, len(got), err)
						return
					}
				} else if !errors.Is(err, fs.ErrNotExist) {
					errs <- fmt.Errorf("%s: Open: %v", key, err)
					return
				}
				switch i % 6 {
				case 0, 3:
					s.Remove(ref.ID)
				case 1:
					s.RemoveKey(key)
				case 2:
					s.RemoveMatching(func(e *entry.Entry) bool { return e.Target == key })
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	committed, nfiles, reserved := s.Usage()
	if reserved != 0 {
		t.Errorf("%d bytes reserved after every fill ended", reserved)
	}
	var onDisk int64
	names := files(t, s.dir)
	for _, name := range names {
		if !strings.HasSuffix(name, bodySuffix) {
			t.Errorf("left behind: %s", name)
		}
		onDisk += fileLen(t, filepath.Join(s.dir, name))
	}
	if onDisk != committed || len(names) != nfiles {
		t.Errorf("index counts %d bytes in %d files, disk has %d in %d", committed, nfiles, onDisk, len(names))
	}
	s.mu.Lock()
	indexed := 0
	for _, it := range s.byPrim {
		for ; it != nil; it = it.next {
			indexed++
		}
	}
	s.mu.Unlock()
	if indexed != nfiles {
		t.Errorf("the identity index holds %d bodies, the LRU %d", indexed, nfiles)
	}
	if committed > s.maxBytes {
		t.Errorf("committed %d bytes, budget %d", committed, s.maxBytes)
	}
}
