package bodystore

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tiercache/tiercache/internal/entry"
	"github.com/tiercache/tiercache/internal/metrics"
)

// reopen closes s and opens its directory again with a budget of maxBytes.
func reopen(t *testing.T, s *Store, maxBytes int64) (*Store, []Recovered, *testMetrics) {
	t.Helper()
	must(t, s.Close())
	m := newTestMetrics(t)
	s2, rec, err := Open(t.Context(), Options{
		Dir: s.dir, MaxBytes: maxBytes, Metrics: m.Metrics, Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s2.Close() })
	return s2, rec, m
}

func recoveredKeys(rec []Recovered) []string {
	var keys []string
	for _, r := range rec {
		keys = append(keys, r.Key)
	}
	slices.Sort(keys)
	return keys
}

func TestRestartReusesVerifiedBodies(t *testing.T) {
	s, _ := testStore(t, Options{})
	bodies := map[string][]byte{
		"GET h/a":                 body(1, 100<<10),
		"GET h/b?q=1 accept=gzip": body(2, 2<<20),
		"GET h/empty":             {},
	}
	refs := map[string]entry.BodyFile{}
	for k, b := range bodies {
		refs[k] = put(t, s, k, b, int64(len(b)))
	}
	committedBefore, _, _ := s.Usage()
	// A fill a crash interrupted (Close would abort a live one).
	must(t, os.WriteFile(filepath.Join(s.dir, strings.Repeat("0f", 16)+tmpSuffix), body(3, 1000), 0o600))

	s2, rec, m := reopen(t, s, 64<<20)
	if got, want := recoveredKeys(rec), []string{"GET h/a", "GET h/b?q=1 accept=gzip", "GET h/empty"}; !slices.Equal(got, want) {
		t.Fatalf("recovered keys %q, want %q", got, want)
	}
	for _, r := range rec {
		var e entry.Entry
		if err := entry.Decode(r.Entry, &e); err != nil {
			t.Fatalf("recovered entry of %q: %v", r.Key, err)
		}
		if e.File == nil || *e.File != refs[r.Key] {
			t.Fatalf("recovered entry of %q refers to %+v, want %+v", r.Key, e.File, refs[r.Key])
		}
		if got := read(t, s2, r.Key, *e.File); !bytes.Equal(got, bodies[r.Key]) {
			t.Fatalf("body of %q reads back different after the restart", r.Key)
		}
	}
	if committed, n, reserved := s2.Usage(); committed != committedBefore || n != 3 || reserved != 0 {
		t.Fatalf("usage after restart %d bytes in %d files (%d reserved), want %d in 3", committed, n, reserved, committedBefore)
	}
	for _, name := range files(t, s2.dir) {
		if strings.HasSuffix(name, tmpSuffix) {
			t.Fatalf("the unfinished fill's temp file %s survived the restart", name)
		}
	}
	if got := errorsCounted(t, m, metrics.BodyOpRecover); got != 0 {
		t.Fatalf("errors_total{op=recover} = %v, want 0", got)
	}
}

func TestRestartRemovesWhatDoesNotVerify(t *testing.T) {
	const key = "GET h/bad"
	tests := map[string]func(t *testing.T, dir, path string){
		"a flipped body byte": func(t *testing.T, _, p string) {
			flip(t, p, headerSize+1000)
		},
		"a truncated trailer": func(t *testing.T, _, p string) {
			must(t, os.Truncate(p, fileLen(t, p)-1))
		},
		"a trailer cut to the body": func(t *testing.T, _, p string) {
			must(t, os.Truncate(p, headerSize+5000))
		},
		"a damaged entry in the trailer": func(t *testing.T, _, p string) {
			flip(t, p, headerSize+5000+4+int64(len(key))+20)
		},
		"a damaged header magic": func(t *testing.T, _, p string) {
			patch(t, p, 0, []byte("X"))
		},
		"a header with another body offset": func(t *testing.T, _, p string) {
			patch(t, p, offHdrBody, []byte{65})
		},
		"a header whose key hash does not match the trailer's key": func(t *testing.T, _, p string) {
			patch(t, p, offHdrKey, []byte{0})
		},
		"a body file renamed to another id": func(t *testing.T, dir, p string) {
			must(t, os.Rename(p, filepath.Join(dir, strings.Repeat("ab", 16)+bodySuffix)))
		},
		"a foreign file named like a body": func(t *testing.T, dir, p string) {
			must(t, os.Remove(p))
			must(t, os.WriteFile(filepath.Join(dir, strings.Repeat("cd", 16)+bodySuffix), []byte("hello, I am not a body"), 0o600))
		},
		"a badly named body file": func(t *testing.T, dir, p string) {
			must(t, os.Rename(p, filepath.Join(dir, "x"+bodySuffix)))
		},
		"an empty body file": func(t *testing.T, _, p string) {
			must(t, os.Truncate(p, 0))
		},
	}
	for name, damage := range tests {
		t.Run(name, func(t *testing.T) {
			s, _ := testStore(t, Options{})
			good := put(t, s, "GET h/good", body(1, 5000), 5000)
			b := body(2, 5000)
			b[1000] = 0x5a
			bad := put(t, s, key, b, 5000)
			damage(t, s.dir, filepath.Join(s.dir, fileName(bad.ID, bodySuffix)))

			s2, rec, m := reopen(t, s, 64<<20)
			if got := recoveredKeys(rec); !slices.Equal(got, []string{"GET h/good"}) {
				t.Fatalf("recovered %q, want only the good body", got)
			}
			if names := files(t, s2.dir); !slices.Equal(names, []string{fileName(good.ID, bodySuffix)}) {
				t.Fatalf("files after restart %q, want only the good body's", names)
			}
			if got := errorsCounted(t, m, metrics.BodyOpRecover); got != 1 {
				t.Fatalf("errors_total{op=recover} = %v, want 1", got)
			}
			if _, n, _ := s2.Usage(); n != 1 {
				t.Fatalf("index holds %d files, want 1", n)
			}
		})
	}
}

func TestRestartLeavesOtherFilesAlone(t *testing.T) {
	s, _ := testStore(t, Options{})
	_ = put(t, s, "GET h/a", body(1, 5000), 5000)
	must(t, os.WriteFile(filepath.Join(s.dir, "notes.txt"), []byte("mine"), 0o600))
	must(t, os.Mkdir(filepath.Join(s.dir, "lost+found.body"), 0o700))
	s2, rec, m := reopen(t, s, 64<<20)
	if len(rec) != 1 {
		t.Fatalf("recovered %d bodies, want 1", len(rec))
	}
	for _, name := range []string{"notes.txt", "lost+found.body"} {
		if _, err := os.Stat(filepath.Join(s2.dir, name)); err != nil {
			t.Fatalf("%s: %v; files the store did not write must stay", name, err)
		}
	}
	if got := errorsCounted(t, m, metrics.BodyOpRecover); got != 0 {
		t.Fatalf("errors_total{op=recover} = %v, want 0", got)
	}
}

func TestRestartOverBudgetEvictsTheOldest(t *testing.T) {
	const n = 100 << 10
	s, _ := testStore(t, Options{})
	base := time.Now().Add(-time.Hour)
	keys := []string{"GET h/0", "GET h/1", "GET h/2"}
	for i, k := range keys {
		ref := put(t, s, k, body(uint64(i), n), n)
		// Written in order 1, 2, 0: 1 is the oldest.
		mt := base.Add(time.Duration((i+2)%3) * time.Minute)
		must(t, os.Chtimes(filepath.Join(s.dir, fileName(ref.ID, bodySuffix)), mt, mt))
	}
	s2, rec, m := reopen(t, s, 2*fileSize("GET h/0", n)+10)
	if got := recoveredKeys(rec); !slices.Equal(got, []string{"GET h/0", "GET h/2"}) {
		t.Fatalf("recovered %q, want all but the oldest (GET h/1)", got)
	}
	if names := files(t, s2.dir); len(names) != 2 {
		t.Fatalf("files after restart: %q, want 2", names)
	}
	if got := testutil.ToFloat64(m.BodyStoreEvictions); got != 1 {
		t.Fatalf("evictions_total = %v, want 1", got)
	}
}

func TestADefaultBudgetComesFromTheFreeSpace(t *testing.T) {
	dir := t.TempDir()
	s, _, err := Open(t.Context(), Options{Dir: dir, Logger: slog.New(slog.DiscardHandler)})
	must(t, err)
	defer s.Close()
	var st syscall.Statfs_t
	must(t, syscall.Statfs(dir, &st))
	free := int64(st.Bavail) * st.Bsize
	// Free space moves while the test runs (other tests write); 90% of it
	// within a margin of 5%.
	if lo, hi := free/100*85, free/100*95; s.maxBytes < lo || s.maxBytes > hi {
		t.Fatalf("budget %d with %d bytes free, want about 90%%", s.maxBytes, free)
	}
	if s.maxObject != DefaultMaxObject {
		t.Fatalf("MaxObject defaulted to %d, want %d", s.maxObject, DefaultMaxObject)
	}
}

func TestOptionsAreValidated(t *testing.T) {
	tests := map[string]struct {
		o    Options
		want string
	}{
		"a missing directory is named":       {Options{}, "--body-dir: must name a directory"},
		"a negative budget is named":         {Options{Dir: "x", MaxBytes: -1}, "--body-dir-size: must be >= 0"},
		"a negative object maximum is named": {Options{Dir: "x", MaxObject: -1}, "bodyStore.maxObjectSize: must be >= 0"},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			if tt.o.Dir != "" {
				tt.o.Dir = filepath.Join(t.TempDir(), tt.o.Dir)
			}
			_, _, err := Open(t.Context(), tt.o)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Open = %v, want an error saying %q", err, tt.want)
			}
		})
	}
}

func TestOpenRefusesAnUnusableDirectory(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	must(t, os.WriteFile(file, nil, 0o600))
	tests := map[string]struct {
		dir  string
		want string
	}{
		// Both fail for root too: permission bits would not.
		"a path under a regular file cannot be created":         {filepath.Join(file, "bodies"), "cannot create it"},
		"a directory on a read-only filesystem is not writable": {"/proc/self", "not writable"},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			_, _, err := Open(t.Context(), Options{Dir: tt.dir, MaxBytes: 1 << 20})
			if err == nil {
				t.Fatal("Open succeeded")
			}
			for _, part := range []string{"--body-dir", tt.dir, tt.want} {
				if !strings.Contains(err.Error(), part) {
					t.Fatalf("error %q does not say %q", err, part)
				}
			}
		})
	}
}

func TestOpenStopsWhenTheContextEnds(t *testing.T) {
	s, _ := testStore(t, Options{})
	_ = put(t, s, "GET h/a", body(1, 5000), 5000)
	must(t, s.Close())
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, _, err := Open(ctx, Options{Dir: s.dir, MaxBytes: 1 << 20})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Open with an ended context = %v, want context.Canceled", err)
	}
	if _, err := os.Stat(filepath.Join(s.dir)); errors.Is(err, fs.ErrNotExist) {
		t.Fatal("the directory went away")
	}
	if names := files(t, s.dir); len(names) != 1 {
		t.Fatalf("files after an interrupted Open: %q; an interrupted scan must not remove valid files", names)
	}
}

func TestRestartKeepsTheNewestBodyOfAKey(t *testing.T) {
	s, _ := testStore(t, Options{})
	base := time.Now().Add(-time.Hour)
	var refs []entry.BodyFile
	for i := range 3 {
		ref := put(t, s, "GET h/a", body(uint64(i), 5000), 5000)
		mt := base.Add(time.Duration(i) * time.Minute)
		must(t, os.Chtimes(filepath.Join(s.dir, fileName(ref.ID, bodySuffix)), mt, mt))
		refs = append(refs, ref)
	}
	_ = put(t, s, "GET h/b", body(9, 5000), 5000)
	s2, rec, _ := reopen(t, s, 64<<20)
	if got := recoveredKeys(rec); !slices.Equal(got, []string{"GET h/a", "GET h/b"}) {
		t.Fatalf("recovered %q, want each key once", got)
	}
	for _, r := range rec {
		var e entry.Entry
		must(t, entry.Decode(r.Entry, &e))
		if r.Key == "GET h/a" && e.File.ID != refs[2].ID {
			t.Fatalf("recovered body %x for GET h/a, want the newest %x", e.File.ID, refs[2].ID)
		}
	}
	if names := files(t, s2.dir); len(names) != 2 {
		t.Fatalf("files after restart %q, want the two kept", names)
	}
	if committed, n, _ := s2.Usage(); n != 2 || committed != 2*fileSize("GET h/a", 5000) {
		t.Fatalf("usage %d bytes in %d files", committed, n)
	}
}

// FuzzRecoverFile hands the restart scan arbitrary bytes as a body file:
// it never panics, and a file it keeps is one whose entry refers to it.
func FuzzRecoverFile(f *testing.F) {
	dir := f.TempDir()
	s, _, err := Open(f.Context(), Options{Dir: dir, MaxBytes: 1 << 20, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = s.Close() })
	w, err := s.Create("GET h/seed", 100)
	if err != nil {
		f.Fatal(err)
	}
	if _, err := w.Write(body(1, 100)); err != nil {
		f.Fatal(err)
	}
	ref, err := w.Commit(meta("GET h/seed"))
	if err != nil {
		f.Fatal(err)
	}
	valid, err := os.ReadFile(filepath.Join(dir, fileName(ref.ID, bodySuffix)))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(valid)
	f.Add(valid[:len(valid)-1])
	f.Add(valid[:headerSize+tailSize])
	f.Add([]byte(headerMagic))
	f.Fuzz(func(t *testing.T, b []byte) {
		dir := t.TempDir()
		must(t, os.WriteFile(filepath.Join(dir, fileName(ref.ID, bodySuffix)), b, 0o600))
		s, rec, err := Open(t.Context(), Options{Dir: dir, MaxBytes: 1 << 20, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		for _, r := range rec {
			var e entry.Entry
			if err := entry.Decode(r.Entry, &e); err != nil || e.File == nil || e.File.ID != ref.ID {
				t.Fatalf("kept a file whose entry does not refer to it: %v %+v", err, e.File)
			}
			if _, err := s.Open(r.Key, *e.File); err != nil {
				t.Fatalf("a recovered body does not open: %v", err)
			}
		}
		if names := files(t, dir); len(names) != len(rec) {
			t.Fatalf("%d files left, %d recovered", len(names), len(rec))
		}
	})
}
