package bodystore

import (
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tiercache/tiercache/internal/entry"
	"github.com/tiercache/tiercache/internal/metrics"
)

// testStore opens a store in a fresh directory with metrics of its own.
func testStore(t *testing.T, o Options) (*Store, *metrics.Metrics) {
	t.Helper()
	if o.Dir == "" {
		o.Dir = t.TempDir()
	}
	if o.MaxBytes == 0 {
		o.MaxBytes = 64 << 20
	}
	m, err := metrics.New(prometheus.NewRegistry(), nil)
	if err != nil {
		t.Fatal(err)
	}
	o.Metrics = m
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

func TestOpenRefusesAnotherKeysBody(t *testing.T) {
	s, _ := testStore(t, Options{})
	ref := put(t, s, "GET h/a", body(2, 1000), 1000)
	_, err := s.Open("GET h/b", ref)
	if !errors.Is(err, ErrMismatch) {
		t.Fatalf("Open for another key = %v, want ErrMismatch", err)
	}
	// The file is fine for its own key and stays.
	_ = read(t, s, "GET h/a", ref)
	_ = errors.Is(err, fs.ErrNotExist)
	_ = filepath.Join
	_ = context.Background
	_ = testutil.ToFloat64
}
