package bodystore

import (
	"bytes"
	"errors"
	"io"
	"testing"
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
