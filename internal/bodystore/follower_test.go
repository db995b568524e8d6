package bodystore

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"
)

// The fill's own client follows its file too, and when the file fails it
// goes on from the origin where the file stopped: a follower must read
// every byte written before the writer broke, then get the error, never
// the error first (the client would lose the bytes in between).
func TestAFollowerReadsEveryByteWrittenBeforeTheFillBroke(t *testing.T) {
	ends := map[string]func(w *Writer){
		"the fill is aborted":               func(w *Writer) { w.Abort() },
		"the store closes under the fill":   func(w *Writer) { _ = w.s.Close() },
		"the body is longer than announced": func(w *Writer) { _, _ = w.Write(make([]byte, 4000)) },
	}
	reads := map[string]func(f *Follower) ([]byte, error){
		"with Read": func(f *Follower) ([]byte, error) { return io.ReadAll(f) },
		"with WriteTo (sendfile)": func(f *Follower) ([]byte, error) {
			var b bytes.Buffer
			_, err := f.WriteTo(&b)
			return b.Bytes(), err
		},
	}
	for endName, end := range ends {
		for readName, read := range reads {
			t.Run(endName+", read "+readName, func(t *testing.T) {
				s, _ := testStore(t, Options{})
				w, err := s.Create("GET h/a", 5000)
				if err != nil {
					t.Fatal(err)
				}
				want := body(3, 3000)
				f := w.Follow()
				defer f.Close()
				for i := 0; i < len(want); i += 1000 {
					if _, err := w.Write(want[i : i+1000]); err != nil {
						t.Fatal(err)
					}
				}
				// Nothing is read before the end: all 3000 bytes are
				// still to come when the writer breaks.
				end(w)
				got, err := read(f)
				if !errors.Is(err, ErrAborted) {
					t.Fatalf("the follower ended with %v, want ErrAborted", err)
				}
				if !bytes.Equal(got, want) {
					t.Fatalf("the follower read %d bytes before the error (equal prefix: %t), want the %d written",
						len(got), bytes.HasPrefix(want, got), len(want))
				}
				w.Abort()
				assertNothingLeft(t, s)
			})
		}
	}
}

// A fill stores its response before any client has all of it
// (Writer.HoldEnd): followers read all but the last byte of a body of
// announced length, and no end of any body, until Release, even once the
// body is committed; then the rest. A client that knows the length has
// the whole response with its last byte, and may ask again at once.
func TestAFollowerReadsAHeldEndOnlyAfterRelease(t *testing.T) {
	for _, tc := range []struct {
		name string
		hint int64
		// shown is what followers read before Release.
		shown int
	}{
		{"a body of announced length", 3000, 2999},
		{"a body of unknown length", -1, 3000},
	} {
		for _, sendfile := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s, WriteTo %t", tc.name, sendfile), func(t *testing.T) {
				s, _ := testStore(t, Options{})
				w, err := s.Create("GET h/a", tc.hint)
				if err != nil {
					t.Fatal(err)
				}
				w.HoldEnd()
				want := body(5, 3000)
				f := w.Follow()
				defer f.Close()
				type read struct {
					n   int
					err error
				}
				reads := make(chan read, 64)
				go func() {
					if sendfile {
						_, err := f.WriteTo(countWriter(func(n int) { reads <- read{n: n} }))
						reads <- read{err: err, n: -1}
						return
					}
					buf := make([]byte, 700)
					for {
						n, err := f.Read(buf)
						if n > 0 {
							reads <- read{n: n}
						}
						if err != nil {
							if err == io.EOF {
								err = nil
							}
							reads <- read{err: err, n: -1}
							return
						}
					}
				}()
				if _, err := w.Write(want); err != nil {
					t.Fatal(err)
				}
				if _, err := w.Commit(meta("GET h/a")); err != nil {
					t.Fatal(err)
				}
				got := 0
				next := func(within time.Duration) (read, bool) {
					select {
					case r := <-reads:
						return r, true
					case <-time.After(within):
						return read{}, false
					}
				}
				for got < tc.shown {
					r, ok := next(5 * time.Second)
					if !ok || r.n < 0 {
						t.Fatalf("the follower read %d bytes and then %v, want %d before the end", got, r.err, tc.shown)
					}
					got += r.n
				}
				if got != tc.shown {
					t.Fatalf("the follower read %d bytes before Release, want %d", got, tc.shown)
				}
				// Committed, but held: nothing more comes (the end would be
				// there at once).
				if r, ok := next(50 * time.Millisecond); ok {
					t.Fatalf("before Release the follower got %+v after its %d bytes", r, got)
				}
				w.Release()
				for {
					r, ok := next(5 * time.Second)
					if !ok {
						t.Fatal("the follower did not end within 5s of Release")
					}
					if r.n < 0 {
						if r.err != nil {
							t.Fatalf("the follower ended with %v", r.err)
						}
						break
					}
					got += r.n
				}
				if got != len(want) {
					t.Fatalf("the follower read %d bytes in all, want %d", got, len(want))
				}
			})
		}
	}
}

// countWriter reports the length of every write (WriteTo's pieces).
type countWriter func(n int)

func (c countWriter) Write(p []byte) (int, error) {
	c(len(p))
	return len(p), nil
}
