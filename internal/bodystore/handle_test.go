package bodystore

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tiercache/tiercache/internal/entry"
	"github.com/tiercache/tiercache/internal/metrics"
)

// descriptorsOf counts this process's open descriptors on files in s's
// directory.
func descriptorsOf(t *testing.T, s *Store) int {
	t.Helper()
	des, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("no /proc/self/fd: %v", err)
	}
	n := 0
	for _, de := range des {
		target, err := os.Readlink(filepath.Join("/proc/self/fd", de.Name()))
		if err == nil && strings.HasPrefix(target, s.dir+string(filepath.Separator)) {
			n++
		}
	}
	return n
}

func TestHitsShareOneKeptDescriptor(t *testing.T) {
	s, _ := testStore(t, Options{})
	want := body(1, 100<<10)
	ref := put(t, s, "GET h/a", want, int64(len(want)))
	if n := descriptorsOf(t, s); n != 0 {
		t.Fatalf("%d descriptors open before any hit", n)
	}
	a, err := s.Open("GET h/a", ref)
	must(t, err)
	b, err := s.Open("GET h/a", ref)
	must(t, err)
	if n := descriptorsOf(t, s); n != 1 {
		t.Fatalf("two hits at once hold %d descriptors, want 1 shared", n)
	}
	// Both read the whole body at once, each at its own offsets.
	ra, rb := a.Section(0, ref.Size), b.Section(0, ref.Size)
	var got [2]bytes.Buffer
	for done := false; !done; {
		na, _ := io.CopyN(&got[0], ra, 4096)
		nb, _ := io.CopyN(&got[1], rb, 1000)
		done = na == 0 && nb == 0
	}
	for i := range got {
		if !bytes.Equal(got[i].Bytes(), want) {
			t.Fatalf("hit %d read %d bytes that are not the body", i, got[i].Len())
		}
	}
	_, _ = a.Close(), b.Close()
	if n := descriptorsOf(t, s); n != 1 {
		t.Fatalf("%d descriptors after the hits ended, want the one kept", n)
	}
	if got := read(t, s, "GET h/a", ref); !bytes.Equal(got, want) {
		t.Fatal("a later hit reads another body")
	}
	s.Remove(ref.ID)
	if n := descriptorsOf(t, s); n != 0 {
		t.Fatalf("%d descriptors open after Remove, want 0", n)
	}
}

func TestADescriptorStaysOpenWhileABodyReadsIt(t *testing.T) {
	s, _ := testStore(t, Options{})
	want := body(2, 300<<10)
	ref := put(t, s, "GET h/a", want, int64(len(want)))
	b, err := s.Open("GET h/a", ref)
	must(t, err)
	r := b.Section(0, ref.Size)
	head := make([]byte, 1000)
	_, err = io.ReadFull(r, head)
	must(t, err)
	// The store lets go of its descriptor (Remove, then Close); the
	// reader's stays until its own Close.
	s.Remove(ref.ID)
	must(t, s.Close())
	rest, err := io.ReadAll(r)
	if err != nil || !bytes.Equal(append(head, rest...), want) {
		t.Fatalf("read %d bytes (%v) after the store let go, want the whole body", len(head)+len(rest), err)
	}
	if n := descriptorsOf(t, s); n != 1 {
		t.Fatalf("%d descriptors while the body is open, want 1", n)
	}
	must(t, b.Close())
	if n := descriptorsOf(t, s); n != 0 {
		t.Fatalf("%d descriptors after the last reader closed, want 0", n)
	}
}

func TestKeptDescriptorsAreBounded(t *testing.T) {
	tests := map[string]struct{ maxOpen, want int }{
		"two at most keeps the two most recently served": {maxOpen: 2, want: 2},
		"a negative bound keeps none":                    {maxOpen: -1, want: 0},
		"the default keeps all four":                     {maxOpen: 0, want: 4},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			s, _ := testStore(t, Options{MaxOpen: tt.maxOpen})
			var refs []entry.BodyFile
			for i := range 4 {
				key := fmt.Sprintf("GET h/%d", i)
				refs = append(refs, put(t, s, key, body(uint64(i), 70<<10), 70<<10))
				read(t, s, key, refs[i])
			}
			if n := descriptorsOf(t, s); n != tt.want {
				t.Fatalf("%d descriptors kept, want %d", n, tt.want)
			}
			// Every body still reads right, kept or not.
			for i, ref := range refs {
				if got := read(t, s, fmt.Sprintf("GET h/%d", i), ref); !bytes.Equal(got, body(uint64(i), 70<<10)) {
					t.Fatalf("body %d reads wrong", i)
				}
			}
			if n := descriptorsOf(t, s); n != tt.want {
				t.Fatalf("%d descriptors kept after more hits, want %d", n, tt.want)
			}
		})
	}
}

// TestHitsNeverReadAnotherBodyUnderChurn serves hits while the bodies
// they read are replaced, removed, purged by key and evicted (a budget of
// three files, two kept descriptors): a descriptor closed while a reader
// still used it could be reused by the next open, and the reader would
// send another body's bytes. Every read either fails or is exactly the
// body its reference names.
func TestHitsNeverReadAnotherBodyUnderChurn(t *testing.T) {
	const n = 80 << 10
	s, _ := testStore(t, Options{MaxBytes: 3 * fileSize("GET h/0", n), MaxOpen: 2})
	type current struct {
		mu   sync.Mutex
		ref  entry.BodyFile
		seed uint64
	}
	keys := make([]current, 4)
	putKey := func(i int, seed uint64) error {
		key := fmt.Sprintf("GET h/%d", i)
		w, err := s.Create(key, n)
		if err != nil {
			return err
		}
		if _, err := w.Write(body(seed, n)); err != nil {
			w.Abort()
			return err
		}
		ref, err := w.Commit(meta(key))
		if err != nil {
			return err
		}
		keys[i].mu.Lock()
		keys[i].ref, keys[i].seed = ref, seed
		keys[i].mu.Unlock()
		return nil
	}
	for i := range keys {
		must(t, putKey(i, uint64(i)))
	}
	deadline := time.Now().Add(10 * time.Second)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	reads := make([]int, 3)
	for g := range 3 {
		wg.Go(func() {
			buf := make([]byte, 7000)
			for i := range 400 {
				if time.Now().After(deadline) {
					return
				}
				k := &keys[(g+i)%len(keys)]
				k.mu.Lock()
				ref, seed := k.ref, k.seed
				k.mu.Unlock()
				b, err := s.Open(fmt.Sprintf("GET h/%d", (g+i)%len(keys)), ref)
				if err != nil {
					continue // replaced, evicted or removed meanwhile
				}
				var got bytes.Buffer
				_, err = io.CopyBuffer(&got, b.Section(0, ref.Size), buf)
				_ = b.Close()
				if err != nil {
					continue
				}
				if !bytes.Equal(got.Bytes(), body(seed, n)) {
					errs <- fmt.Errorf("a hit on body %x read %d bytes that are not its body", ref.ID, got.Len())
					return
				}
				reads[g]++
			}
		})
	}
	wg.Go(func() {
		for i := range 300 {
			if time.Now().After(deadline) {
				return
			}
			k := i % len(keys)
			switch i % 3 {
			case 0: // replaced: the old body removed, as the proxy does
				keys[k].mu.Lock()
				old := keys[k].ref.ID
				keys[k].mu.Unlock()
				if err := putKey(k, uint64(100+i)); err == nil {
					s.Remove(old)
				}
			case 1:
				s.RemoveKey(fmt.Sprintf("GET h/%d", k))
				_ = putKey(k, uint64(100+i))
			case 2: // a new body evicts the least recently used
				_ = putKey(k, uint64(100+i))
			}
		}
	})
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if reads[0]+reads[1]+reads[2] == 0 {
		t.Fatal("no hit read a body: the test proves nothing")
	}
	if n := descriptorsOf(t, s); n > 2 {
		t.Fatalf("%d descriptors open after the churn, want at most the 2 kept", n)
	}
}

func TestAKeptDescriptorOfADeletedFileIsNotServed(t *testing.T) {
	s, m := testStore(t, Options{})
	ref := put(t, s, "GET h/a", body(3, 70<<10), 70<<10)
	read(t, s, "GET h/a", ref)
	must(t, os.Remove(filepath.Join(s.dir, fileName(ref.ID, bodySuffix))))
	if _, err := s.Open("GET h/a", ref); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Open of a deleted file served before = %v, want fs.ErrNotExist", err)
	}
	if _, files, _ := s.Usage(); files != 0 {
		t.Fatalf("index has %d files after the deleted one was asked for, want 0", files)
	}
	if n := descriptorsOf(t, s); n != 0 {
		t.Fatalf("%d descriptors still open on the deleted file", n)
	}
	if got := errorsCounted(t, m, metrics.BodyOpOpen); got != 1 {
		t.Errorf("errors_total{op=open} = %v, want 1", got)
	}
}
