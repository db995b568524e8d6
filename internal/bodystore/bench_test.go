package bodystore

import (
	"strconv"
	"testing"
)

// BenchmarkFill is the cost of storing a body: Create, Write in 32 KiB
// pieces (what the proxy's copy loop hands over), Commit, and Remove so
// the directory does not grow.
func BenchmarkFill(b *testing.B) {
	for _, size := range []int{100 << 10, 1 << 20} {
		b.Run(strconv.Itoa(size>>10)+"KiB", func(b *testing.B) {
			s, _, err := Open(b.Context(), Options{Dir: b.TempDir(), MaxBytes: 1 << 30})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			data := body(1, size)
			m := meta("GET h/bench")
			b.SetBytes(int64(size))
			b.ReportAllocs()
			for b.Loop() {
				w, err := s.Create("GET h/bench", int64(size))
				if err != nil {
					b.Fatal(err)
				}
				for p := data; len(p) > 0; p = p[min(len(p), 32<<10):] {
					if _, err := w.Write(p[:min(len(p), 32<<10)]); err != nil {
						b.Fatal(err)
					}
				}
				ref, err := w.Commit(m)
				if err != nil {
					b.Fatal(err)
				}
				s.Remove(ref.ID)
			}
		})
	}
}

// BenchmarkHitOverhead is what a hit costs the body store before the
// body moves: Open (of a file served before: the index check and LRU
// touch, and an fstat of the kept descriptor), Section and Close.
func BenchmarkHitOverhead(b *testing.B) {
	s, _, err := Open(b.Context(), Options{Dir: b.TempDir(), MaxBytes: 1 << 30})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	w, err := s.Create("GET h/bench", 100<<10)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := w.Write(body(1, 100<<10)); err != nil {
		b.Fatal(err)
	}
	ref, err := w.Commit(meta("GET h/bench"))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		body, err := s.Open("GET h/bench", ref)
		if err != nil {
			b.Fatal(err)
		}
		_ = body.Section(0, ref.Size)
		_ = body.Close()
	}
}
