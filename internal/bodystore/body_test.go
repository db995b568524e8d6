package bodystore

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"

	"github.com/tiercache/tiercache/internal/entry"
)

// TestSectionIsAFileRegion pins what connguard's connection needs to send
// a section with sendfile (connguard.FileRegion): the descriptor and the
// span still to send, which Advance moves, and which Read then continues
// from.
func TestSectionIsAFileRegion(t *testing.T) {
	s, _ := testStore(t, Options{})
	want := body(1, 10000)
	ref := put(t, s, "GET h/a", want, int64(len(want)))
	b, err := s.Open("GET h/a", ref)
	if err != nil {
		t.Fatal(err)
	}
	sec, ok := b.Section(100, 200).(*Section)
	if !ok {
		t.Fatalf("Section returned %T, want *Section", b.Section(100, 200))
	}
	if fd, off, n := sec.FileRegion(); fd < 0 || off != headerSize+100 || n != 200 {
		t.Fatalf("FileRegion() = %d, %d, %d; want an open descriptor, %d, 200", fd, off, n, headerSize+100)
	}
	sec.Advance(50)
	got, err := io.ReadAll(sec)
	if err != nil || !bytes.Equal(got, want[150:300]) {
		t.Fatalf("after Advance(50) Read gave %d bytes (%v), want bytes 150-299", len(got), err)
	}
	b.Section(0, 10)
	_ = b.Close()
	if fd, _, _ := sec.FileRegion(); fd != -1 {
		t.Fatalf("FileRegion after Close gives descriptor %d, want -1", fd)
	}
	if n, err := sec.Read(make([]byte, 10)); n != 0 || !errors.Is(err, ErrClosed) {
		t.Fatalf("Read after Close = %d, %v; want 0 and ErrClosed", n, err)
	}
}

func TestSectionsOverLoopbackTCP(t *testing.T) {
	s, _ := testStore(t, Options{})
	want := body(2, 3<<20+17)
	ref := put(t, s, "GET h/a", want, int64(len(want)))

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()

	tests := map[string]struct{ off, n, wantOff, wantN int64 }{
		"the whole body":                  {0, ref.Size, 0, ref.Size},
		"a range from the middle":         {1 << 20, 12345, 1 << 20, 12345},
		"the last byte":                   {ref.Size - 1, 1, ref.Size - 1, 1},
		"a range past the end is clamped": {ref.Size - 10, 100, ref.Size - 10, 10},
		"a negative offset is clamped":    {-5, 10, 0, 10},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			got := make(chan readResult, 1)
			go func() {
				c, err := ln.Accept()
				if err != nil {
					got <- readResult{nil, err}
					return
				}
				defer c.Close()
				b, err := io.ReadAll(c)
				got <- readResult{b, err}
			}()
			c, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			b, err := s.Open("GET h/a", ref)
			if err != nil {
				t.Fatal(err)
			}
			n, err := io.Copy(c.(*net.TCPConn), b.Section(tt.off, tt.n))
			_ = b.Close()
			_ = c.Close()
			if err != nil || n != tt.wantN {
				t.Fatalf("io.Copy = %d, %v; want %d", n, err, tt.wantN)
			}
			r := waitResult(t, got)
			if r.err != nil || !bytes.Equal(r.b, want[tt.wantOff:tt.wantOff+tt.wantN]) {
				t.Fatalf("received %d bytes (%v) that are not the section", len(r.b), r.err)
			}
		})
	}
}

func TestOpenDecisions(t *testing.T) {
	const key = "GET h/a"
	tests := map[string]struct {
		key     string
		ref     func(entry.BodyFile) entry.BodyFile
		damage  func(t *testing.T, path string)
		want    error
		removed bool // the file is removed (damaged), not just refused
		// inPlace: the damage rewrites bytes of the file and keeps its
		// size, which a kept descriptor's fstat does not see (handle.go).
		inPlace bool
	}{
		"the body of the key and reference opens": {},
		"another key's body is refused and kept":  {key: "GET h/b", want: ErrMismatch},
		"a reference with another size is refused and kept": {want: ErrMismatch,
			ref: func(r entry.BodyFile) entry.BodyFile { r.Size--; return r }},
		"a reference with another CRC is refused and kept": {want: ErrMismatch,
			ref: func(r entry.BodyFile) entry.BodyFile { r.CRC++; return r }},
		"a file that is gone is not found": {want: fs.ErrNotExist, removed: true,
			damage: func(t *testing.T, p string) { must(t, os.Remove(p)) }},
		"a file with its trailer cut is removed": {want: ErrMismatch, removed: true,
			damage: func(t *testing.T, p string) { must(t, os.Truncate(p, fileLen(t, p)-3)) }},
		"a file cut inside the header is removed": {want: ErrMismatch, removed: true,
			damage: func(t *testing.T, p string) { must(t, os.Truncate(p, 10)) }},
		"a file with a foreign magic is removed": {want: ErrMismatch, removed: true, inPlace: true,
			damage: func(t *testing.T, p string) { patch(t, p, 0, []byte("XXXX")) }},
		"a file with another id in its header is removed": {want: ErrMismatch, removed: true, inPlace: true,
			damage: func(t *testing.T, p string) { flip(t, p, offHdrID) }},
		"a file with a byte inserted into the body is removed": {want: ErrMismatch, removed: true,
			damage: func(t *testing.T, p string) {
				b, err := os.ReadFile(p)
				must(t, err)
				must(t, os.WriteFile(p, slices.Insert(b, headerSize+100, 'x'), 0o600))
			}},
		"a file grown after commit is removed": {want: ErrMismatch, removed: true,
			damage: func(t *testing.T, p string) { must(t, os.Truncate(p, fileLen(t, p)+1)) }},
	}
	// A hit checks what the trailer records against the index; a file the
	// index does not know (its Remove is under way) is checked against its
	// trailer; a file served before is checked through its kept
	// descriptor. All must decide alike, but for damage done in place,
	// which only a first open reads (the body's own bytes are checked at
	// restart, never by a hit).
	for _, mode := range []string{"", "unknown to the index: ", "served before: "} {
		for name, tt := range tests {
			if mode == "served before: " && tt.inPlace {
				tt.want, tt.removed = nil, false
			}
			t.Run(mode+name, func(t *testing.T) {
				s, _ := testStore(t, Options{})
				ref := put(t, s, key, body(3, 5000), 5000)
				path := filepath.Join(s.dir, fileName(ref.ID, bodySuffix))
				switch mode {
				case "unknown to the index: ":
					s.forget(ref.ID)
				case "served before: ":
					read(t, s, key, ref)
					if kept := descriptorsOf(t, s); kept != 1 {
						t.Fatalf("%d descriptors kept after a hit, want 1", kept)
					}
				}
				if tt.damage != nil {
					tt.damage(t, path)
				}
				if tt.ref != nil {
					ref = tt.ref(ref)
				}
				b, err := s.Open(cmpOrStr(tt.key, key), ref)
				if !errors.Is(err, tt.want) {
					t.Fatalf("Open = %v, want %v", err, tt.want)
				}
				if err == nil {
					got, err := io.ReadAll(b.Section(0, b.Size()))
					_ = b.Close()
					if err != nil || !bytes.Equal(got, body(3, 5000)) {
						t.Fatalf("read %d bytes (%v), want the body", len(got), err)
					}
					return
				}
				_, statErr := os.Stat(path)
				if removed := errors.Is(statErr, fs.ErrNotExist); removed != tt.removed {
					t.Fatalf("file removed: %v, want %v", removed, tt.removed)
				}
				if _, n, _ := s.Usage(); mode != "unknown to the index: " && (n == 0) != tt.removed {
					t.Fatalf("index holds %d files; want the file forgotten only when removed", n)
				}
				if kept := descriptorsOf(t, s); tt.removed && kept != 0 {
					t.Fatalf("%d descriptors still open on the removed file", kept)
				}
			})
		}
	}
}

// TestSectionsOfOneBodyInTurn: one Body serves sections at any offsets
// in turn.
func TestSectionsOfOneBodyInTurn(t *testing.T) {
	s, _ := testStore(t, Options{})
	want := body(5, 10000)
	ref := put(t, s, "GET h/a", want, int64(len(want)))
	b, err := s.Open("GET h/a", ref)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	for i, sec := range []struct{ off, n int64 }{{0, 100}, {0, 50}, {10, 20}, {0, 10000}, {9990, 10}} {
		got, err := io.ReadAll(b.Section(sec.off, sec.n))
		if err != nil || !bytes.Equal(got, want[sec.off:sec.off+sec.n]) {
			t.Fatalf("section %d (%d+%d): read %d bytes (%v) that are not the section", i, sec.off, sec.n, len(got), err)
		}
	}
}

func cmpOrStr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func fileLen(t *testing.T, p string) int64 {
	t.Helper()
	fi, err := os.Stat(p)
	must(t, err)
	return fi.Size()
}

// patch overwrites bytes of the file at off.
func patch(t *testing.T, p string, off int64, b []byte) {
	t.Helper()
	f, err := os.OpenFile(p, os.O_WRONLY, 0)
	must(t, err)
	_, err = f.WriteAt(b, off)
	must(t, err)
	must(t, f.Close())
}

// flip inverts the byte at off of the file at p: a change whatever the
// byte was (a fixed byte written there would leave a random id that
// already held it, one time in 256, unchanged).
func flip(t *testing.T, p string, off int64) {
	t.Helper()
	b, err := os.ReadFile(p)
	must(t, err)
	patch(t, p, off, []byte{^b[off]})
}

func TestAReaderKeepsReadingAFileDeletedUnderIt(t *testing.T) {
	s, _ := testStore(t, Options{})
	want := body(4, 1<<20)
	ref := put(t, s, "GET h/a", want, int64(len(want)))
	b, err := s.Open("GET h/a", ref)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	r := b.Section(0, ref.Size)
	head := make([]byte, 1000)
	if _, err := io.ReadFull(r, head); err != nil {
		t.Fatal(err)
	}
	must(t, os.Remove(filepath.Join(s.dir, fileName(ref.ID, bodySuffix))))
	rest, err := io.ReadAll(r)
	if err != nil || !bytes.Equal(append(head, rest...), want) {
		t.Fatalf("read %d bytes (%v) after the file was deleted, want the whole body", len(head)+len(rest), err)
	}
}

// fileName is the name of a body file in the store's directory (the store
// builds its paths in Store.path without this allocation).
func fileName(id [16]byte, suffix string) string {
	return hex.EncodeToString(id[:]) + suffix
}

func TestTransientTellsAShortageFromAFileThatIsBad(t *testing.T) {
	openErr := func(errno syscall.Errno) error {
		return fmt.Errorf("bodystore: opening a body: %w", &fs.PathError{Op: "open", Path: "x.body", Err: errno})
	}
	tests := map[string]struct {
		err  error
		want bool
	}{
		"the process out of descriptors keeps the file":    {openErr(syscall.EMFILE), true},
		"the system out of descriptors keeps the file":     {openErr(syscall.ENFILE), true},
		"the kernel out of memory keeps the file":          {openErr(syscall.ENOMEM), true},
		"an interrupted open keeps the file":               {openErr(syscall.EINTR), true},
		"a read that would block keeps the file":           {fmt.Errorf("pread: %w", syscall.EAGAIN), true},
		"a file that is gone is not transient":             {openErr(syscall.ENOENT), false},
		"an unreadable disk is not transient":              {fmt.Errorf("pread: %w", syscall.EIO), false},
		"a file the sidecar may not read is not transient": {openErr(syscall.EACCES), false},
		"another key's file is not transient":              {fmt.Errorf("body: %w", ErrMismatch), false},
		"no error is not transient":                        {nil, false},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := Transient(tc.err); got != tc.want {
				t.Fatalf("Transient(%v) = %v, want %v", tc.err, got, tc.want)
			}
		})
	}
}
