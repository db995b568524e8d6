package bodystore

import (
	"bytes"
	"errors"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/tiercache/tiercache/internal/entry"
	"github.com/tiercache/tiercache/internal/metrics"
)

// assertNothingLeft checks that a failed fill left no file and no
// reservation behind.
func assertNothingLeft(t *testing.T, s *Store) {
	t.Helper()
	if names := files(t, s.dir); len(names) != 0 {
		t.Errorf("files left behind: %q", names)
	}
	if committed, n, reserved := s.Usage(); committed != 0 || n != 0 || reserved != 0 {
		t.Errorf("usage after the failed fill: %d bytes, %d files, %d reserved; want none", committed, n, reserved)
	}
}

func TestCommitDecisions(t *testing.T) {
	const key = "GET h/a"
	inline := func(entry.BodyFile) []byte {
		return entry.Encode(nil, &entry.Entry{Kind: entry.KindResponse, Status: 200, Body: []byte("x")})
	}
	otherID := func(ref entry.BodyFile) []byte {
		ref.ID[0] ^= 1
		return meta(key)(ref)
	}
	otherSize := func(ref entry.BodyFile) []byte {
		ref.Size++
		return meta(key)(ref)
	}
	otherCRC := func(ref entry.BodyFile) []byte {
		ref.CRC++
		return meta(key)(ref)
	}
	tests := map[string]struct {
		hint      int64
		writes    []int // sizes of the writes
		meta      func(entry.BodyFile) []byte
		wantWrite error // the error of the last write
		want      error // Commit's error
	}{
		"a body of exactly the announced length commits":                         {hint: 1000, writes: []int{600, 400}},
		"a body of unknown length commits":                                       {hint: -1, writes: []int{600, 400, 3 << 20}},
		"an empty body commits":                                                  {hint: 0},
		"a truncated body is not committed":                                      {hint: 1000, writes: []int{600}, want: ErrLength},
		"a body longer than its Content-Length breaks the write":                 {hint: 1000, writes: []int{600, 401}, wantWrite: ErrLength, want: ErrLength},
		"a body of unknown length past the maximum breaks":                       {hint: -1, writes: []int{4 << 20, 1}, wantWrite: ErrTooLarge, want: ErrTooLarge},
		"an entry with an inline body is refused":                                {hint: 10, writes: []int{10}, meta: inline, want: ErrMismatch},
		"an entry naming another body is refused":                                {hint: 10, writes: []int{10}, meta: otherID, want: ErrMismatch},
		"an entry with another size is refused":                                  {hint: 10, writes: []int{10}, meta: otherSize, want: ErrMismatch},
		"bytes that differ from the entry's CRC (corrupt L2 chunks) are refused": {hint: 10, writes: []int{10}, meta: otherCRC, want: ErrMismatch},
		"garbage for an entry is refused": {hint: 10, writes: []int{10}, want: ErrMismatch,
			meta: func(entry.BodyFile) []byte { return []byte("not an entry") }},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			s, m := testStore(t, Options{MaxObject: 4 << 20})
			w, err := s.Create(key, tt.hint)
			if err != nil {
				t.Fatal(err)
			}
			var want []byte
			var werr error
			for i, n := range tt.writes {
				p := body(uint64(i), n)
				if _, werr = w.Write(p); werr != nil {
					break
				}
				want = append(want, p...)
			}
			if !errors.Is(werr, tt.wantWrite) {
				t.Fatalf("last Write = %v, want %v", werr, tt.wantWrite)
			}
			ref, err := w.Commit(cmpOr(tt.meta, meta(key)))
			if !errors.Is(err, tt.want) {
				t.Fatalf("Commit = %v, want %v", err, tt.want)
			}
			w.Abort() // a no-op either way
			if tt.want != nil {
				assertNothingLeft(t, s)
				if got := errorsCounted(t, m, metrics.BodyOpCommit); got != 1 {
					t.Errorf("errors_total{op=commit} = %v, want 1", got)
				}
				return
			}
			if got := read(t, s, key, ref); !bytes.Equal(got, want) {
				t.Fatalf("read back %d bytes, wrote %d", len(got), len(want))
			}
			if _, _, reserved := s.Usage(); reserved != 0 {
				t.Fatalf("%d bytes still reserved after Commit", reserved)
			}
		})
	}
}

func cmpOr(f, g func(entry.BodyFile) []byte) func(entry.BodyFile) []byte {
	if f != nil {
		return f
	}
	return g
}

func TestAbortRemovesTheTempFileAndTheReservation(t *testing.T) {
	s, _ := testStore(t, Options{})
	w, err := s.Create("GET h/a", -1)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(body(1, 3<<20)); err != nil {
		t.Fatal(err)
	}
	if names := files(t, s.dir); len(names) != 1 {
		t.Fatalf("files while writing: %q, want the temp file", names)
	}
	w.Abort()
	assertNothingLeft(t, s)
	if _, err := w.Write([]byte("x")); err == nil {
		t.Fatal("Write after Abort succeeded")
	}
	if _, err := w.Commit(meta("GET h/a")); !errors.Is(err, ErrAborted) {
		t.Fatalf("Commit after Abort = %v, want ErrAborted", err)
	}
}

// readAll reads f to the end in a goroutine and delivers the result.
type readResult struct {
	b   []byte
	err error
}

func readAllAsync(f *Follower) <-chan readResult {
	ch := make(chan readResult, 1)
	go func() {
		b, err := io.ReadAll(f)
		ch <- readResult{b, err}
	}()
	return ch
}

func waitResult(t *testing.T, ch <-chan readResult) readResult {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("a follower did not return within 10 s")
		return readResult{}
	}
}

func TestFollowersStreamTheGrowingBody(t *testing.T) {
	s, _ := testStore(t, Options{})
	want := body(5, 1<<20)
	w, err := s.Create("GET h/a", int64(len(want)))
	if err != nil {
		t.Fatal(err)
	}
	early := w.Follow()
	defer early.Close()

	// A follower receives each chunk before the next is written: it is
	// streamed, not handed the body at the end.
	buf := make([]byte, len(want))
	got := 0
	for off := 0; off < len(want); off += 64 << 10 {
		chunk := want[off : off+64<<10]
		if _, err := w.Write(chunk); err != nil {
			t.Fatal(err)
		}
		if off == len(want)/2 {
			mid := w.Follow()
			defer mid.Close()
			ch := readAllAsync(mid)
			defer func() {
				r := waitResult(t, ch)
				if r.err != nil || !bytes.Equal(r.b, want) {
					t.Errorf("a follower that started halfway read %d bytes, %v", len(r.b), r.err)
				}
			}()
		}
		for got < off+len(chunk) {
			n, err := early.Read(buf[got : off+len(chunk)])
			if err != nil {
				t.Fatalf("Read at %d: %v", got, err)
			}
			got += n
		}
	}
	// Everything is read; the next Read waits for Commit, then says EOF.
	ch := make(chan error, 1)
	go func() {
		_, err := early.Read(make([]byte, 1))
		ch <- err
	}()
	if _, err := w.Commit(meta("GET h/a")); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-ch:
		if err != io.EOF {
			t.Fatalf("Read after Commit = %v, want io.EOF", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Commit did not wake a waiting follower")
	}
	if !bytes.Equal(buf, want) {
		t.Fatal("the follower read different bytes")
	}

	late := w.Follow()
	defer late.Close()
	if r := waitResult(t, readAllAsync(late)); r.err != nil || !bytes.Equal(r.b, want) {
		t.Fatalf("a follower that started after Commit read %d bytes, %v", len(r.b), r.err)
	}
}

func TestFollowersOfAnAbortedFillGetAnError(t *testing.T) {
	tests := map[string]func(w *Writer){
		"the fill is aborted":                    func(w *Writer) { w.Abort() },
		"the store closes under the fill":        func(w *Writer) { _ = w.s.Close() },
		"the body is longer than announced":      func(w *Writer) { _, _ = w.Write(make([]byte, 2000)) },
		"the commit finds the body is too short": func(w *Writer) { _, _ = w.Commit(meta("GET h/a")) },
	}
	for name, end := range tests {
		t.Run(name, func(t *testing.T) {
			s, _ := testStore(t, Options{})
			w, err := s.Create("GET h/a", 1000)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := w.Write(make([]byte, 100)); err != nil {
				t.Fatal(err)
			}
			f := w.Follow()
			defer f.Close()
			// Consume what is there, so the next Read has to wait.
			if _, err := io.ReadFull(f, make([]byte, 100)); err != nil {
				t.Fatal(err)
			}
			ch := readAllAsync(f)
			end(w)
			r := waitResult(t, ch)
			if !errors.Is(r.err, ErrAborted) {
				t.Fatalf("follower got %d bytes and %v, want ErrAborted", len(r.b), r.err)
			}
			w.Abort()
			assertNothingLeft(t, s)
			after := w.Follow()
			defer after.Close()
			if _, err := after.Read(make([]byte, 10)); !errors.Is(err, ErrAborted) {
				t.Fatalf("a follower that starts after the abort got %v, want ErrAborted", err)
			}
		})
	}
}

func TestClosingAFollowerWakesItsRead(t *testing.T) {
	s, _ := testStore(t, Options{})
	w, err := s.Create("GET h/a", -1)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Abort()
	f := w.Follow()
	ch := readAllAsync(f)
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if r := waitResult(t, ch); !errors.Is(r.err, ErrClosed) {
		t.Fatalf("a closed follower's Read = %v, want ErrClosed", r.err)
	}
}

func TestATempFileDeletedUnderAFillFailsItsCommit(t *testing.T) {
	s, m := testStore(t, Options{})
	w, err := s.Create("GET h/a", 2000)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(make([]byte, 1000)); err != nil {
		t.Fatal(err)
	}
	must(t, os.Remove(filepath.Join(s.dir, fileName(w.ID(), tmpSuffix))))
	if _, err := w.Write(make([]byte, 1000)); err != nil {
		t.Fatal(err) // the fd still writes; the name is gone
	}
	if _, err := w.Commit(meta("GET h/a")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Commit = %v, want fs.ErrNotExist from the rename", err)
	}
	assertNothingLeft(t, s)
	if got := errorsCounted(t, m, metrics.BodyOpCommit); got != 1 {
		t.Errorf("errors_total{op=commit} = %v, want 1", got)
	}
}

// tcpPair returns both ends of a loopback TCP connection.
func tcpPair(t *testing.T) (client, server *net.TCPConn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	must(t, err)
	sc := <-accepted
	if sc == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { _ = c.Close(); _ = sc.Close() })
	return c.(*net.TCPConn), sc.(*net.TCPConn)
}

func TestFollowersCopyToATCPConnection(t *testing.T) {
	for name, abort := range map[string]bool{"a committed fill": false, "an aborted fill": true} {
		t.Run(name, func(t *testing.T) {
			s, _ := testStore(t, Options{})
			want := body(6, 2<<20)
			w, err := s.Create("GET h/a", int64(len(want)))
			must(t, err)
			f := w.Follow()
			defer f.Close()
			if _, ok := any(f).(io.WriterTo); !ok {
				t.Fatal("Follower is not an io.WriterTo: io.Copy would copy through user space, not sendfile")
			}
			client, server := tcpPair(t)

			received := make(chan readResult, 1)
			go func() {
				b, err := io.ReadAll(client)
				received <- readResult{b, err}
			}()
			copied := make(chan error, 1)
			go func() {
				// io.Copy takes the follower's WriteTo: pieces go to the
				// connection's ReadFrom as they are written.
				_, err := io.Copy(server, f)
				_ = server.CloseWrite()
				copied <- err
			}()

			half := len(want) / 2
			for off := 0; off < half; off += 128 << 10 {
				_, err := w.Write(want[off : off+128<<10])
				must(t, err)
			}
			if abort {
				w.Abort()
			} else {
				_, err := w.Write(want[half:])
				must(t, err)
				_, err = w.Commit(meta("GET h/a"))
				must(t, err)
			}
			var cerr error
			select {
			case cerr = <-copied:
			case <-time.After(10 * time.Second):
				t.Fatal("the copy did not end within 10 s")
			}
			r := waitResult(t, received)
			if abort {
				if !errors.Is(cerr, ErrAborted) {
					t.Fatalf("copy of an aborted fill = %v, want ErrAborted", cerr)
				}
				if len(r.b) > half || !bytes.Equal(r.b, want[:len(r.b)]) {
					t.Fatalf("the client got %d bytes that are not a prefix of what was written", len(r.b))
				}
				return
			}
			if cerr != nil || r.err != nil || !bytes.Equal(r.b, want) {
				t.Fatalf("copy %v, client got %d bytes (%v), want the %d written", cerr, len(r.b), r.err, len(want))
			}
		})
	}
}
