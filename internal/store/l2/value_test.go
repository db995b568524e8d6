package l2

import (
	"strings"
	"testing"

	"github.com/tiercache/tiercache/internal/entry"
)

func TestWrapRoundTrip(t *testing.T) {
	want := testEntry("/p?q=1", "a", "b")
	for _, key := range []string{"", "k", strings.Repeat("long key ", 100)} {
		b := wrap("tc:ns/t:", key, want)
		if len(b) != cap(b) {
			t.Errorf("wrap allocated %d bytes for %d", cap(b), len(b))
		}
		var got entry.Entry
		k, err := unwrap(b, "tc:ns/t:", &got)
		if err != nil || k != key || !sameEntry(&got, want) {
			t.Fatalf("unwrap(wrap(%q)) = %q, %v", key, k, err)
		}
		if err := unwrapFor(b, "tc:ns/t:", key, &got); err != nil {
			t.Fatalf("unwrapFor: %v", err)
		}
		if err := unwrapFor(b, "tc:ns/t:", key+"x", &got); err == nil {
			t.Fatal("unwrapFor accepted another key")
		}
		// Tiers whose prefixes nest are still told apart.
		for _, other := range []string{"tc:ns/", "tc:ns/t:x:", ""} {
			if _, err := unwrap(b, other, &got); err == nil {
				t.Fatalf("tier %q accepted tier tc:ns/t:'s value", other)
			}
			if err := unwrapFor(wrap(other, "tc:ns/t:"+key, want), "tc:ns/t:", key, &got); err == nil {
				t.Fatalf("tier tc:ns/t: accepted tier %q's value for the key %q", other, "tc:ns/t:"+key)
			}
		}
	}
}

// FuzzUnwrap: no stored value, however mangled, panics the reader, and
// whatever it accepts re-encodes to the same bytes.
func FuzzUnwrap(f *testing.F) {
	good := wrap("tc:ns/t:", "GET example.com/", testEntry("/", "tag"))
	f.Add(good, "GET example.com/")
	f.Add(good[:len(good)/2], "GET example.com/")
	f.Add([]byte(valueMagic+"\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01"), "")
	f.Add([]byte("garbage"), "k")
	f.Fuzz(func(t *testing.T, b []byte, key string) {
		var e entry.Entry
		if err := unwrapFor(b, "tc:ns/t:", key, &e); err == nil {
			if got := wrap("tc:ns/t:", key, &e); string(got) != string(b) {
				t.Fatalf("accepted a value that does not re-encode to itself")
			}
		}
		if k, err := unwrap(b, "tc:ns/t:", &e); err == nil {
			if got := wrap("tc:ns/t:", k, &e); string(got) != string(b) {
				t.Fatalf("accepted a value that does not re-encode to itself")
			}
		}
	})
}

func TestGlobEscape(t *testing.T) {
	for in, want := range map[string]string{
		"tc:ns/tier:e:": "tc:ns/tier:e:",
		`a*b?c[d]e\f`:   `a\*b\?c\[d\]e\\f`,
	} {
		if got := globEscape(in); got != want {
			t.Errorf("globEscape(%q) = %q, want %q", in, got, want)
		}
	}
}
