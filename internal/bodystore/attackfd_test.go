package bodystore

import (
	"errors"
	"testing"
	"unsafe"
)

// TestAKeptDescriptorIsNotServedForAnotherKeyWhenTheCallersKeyBufferIsReused:
// the proxy hands Open a key that aliases a pooled buffer
// (cachekey.Builder.Key is an unsafe.String over it), which the next
// request overwrites with its own key. A kept descriptor must not keep
// the caller's string: its key check would then compare the next
// request's key with itself, and a reference to one key's file found
// under another key (which Open refuses: "the file belongs to another
// key") would be served that file.
func TestAKeptDescriptorIsNotServedForAnotherKeyWhenTheCallersKeyBufferIsReused(t *testing.T) {
	s, _ := testStore(t, Options{})
	const keyA, keyB = "GET h/a", "GET h/b" // one length, as /x?id=1 and /x?id=2
	refA := put(t, s, keyA, body(1, 70<<10), 70<<10)
	put(t, s, keyB, body(2, 70<<10), 70<<10)

	// The hit on A, with its key in a buffer the caller reuses.
	buf := []byte(keyA)
	b, err := s.Open(unsafe.String(&buf[0], len(buf)), refA)
	must(t, err)
	must(t, b.Close())
	// The buffer now holds the next request's key.
	copy(buf, keyB)

	// An entry under B that names A's file (what the header check exists
	// for) is never served A's body.
	if b, err := s.Open(keyB, refA); !errors.Is(err, ErrMismatch) {
		if err == nil {
			_ = b.Close()
		}
		t.Fatalf("Open(B, A's reference) after A's hit = %v, want ErrMismatch: B would be sent A's body", err)
	}
	// A's own hits still share the kept descriptor.
	got := read(t, s, keyA, refA)
	if string(got) != string(body(1, 70<<10)) {
		t.Fatal("A's hit read another body")
	}
	if n := descriptorsOf(t, s); n != 1 {
		t.Fatalf("%d descriptors after A's hits, want the one kept", n)
	}
}
