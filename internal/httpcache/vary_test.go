package httpcache_test

import (
	"bytes"
	"net/http"
	"reflect"
	"testing"

	"github.com/tiercache/tiercache/internal/httpcache"
)

func TestVaryNames(t *testing.T) {
	tests := []struct {
		name     string
		h        httpcache.Header
		want     []string
		wantStar bool
	}{
		{"no Vary gives nothing", hdr(), nil, false},
		{"names are lowercased and sorted", hdr("Vary", "Accept-Encoding, Accept"), []string{"accept", "accept-encoding"}, false},
		{"duplicates across lines are removed", hdr("Vary", "accept", "Vary", "ACCEPT, Origin"), []string{"accept", "origin"}, false},
		{"empty elements and whitespace are skipped", hdr("Vary", " , accept ,,\t"), []string{"accept"}, false},
		{"a star is reported", hdr("Vary", "*"), nil, true},
		{"a star in a list is reported with the names", hdr("Vary", "Origin, *"), []string{"origin"}, true},
		{"another Header kind is read", entryHeader{{"vary", "X-B, x-a"}}, []string{"x-a", "x-b"}, false},
		{"a nil Header gives nothing", nil, nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, star := httpcache.VaryNames(tt.h)
			if !reflect.DeepEqual(got, tt.want) || star != tt.wantStar {
				t.Errorf("VaryNames = %q, %v; want %q, %v", got, star, tt.want, tt.wantStar)
			}
		})
	}
}

func TestAppendVaryKeyEquivalence(t *testing.T) {
	names := []string{"accept", "accept-encoding"}
	key := func(h httpcache.Header) string { return string(httpcache.AppendVaryKey(nil, names, h)) }
	same := []struct {
		name string
		a, b httpcache.Header
	}{
		{"whitespace around commas is removed", hdr("Accept", "a/b , c/d"), hdr("Accept", "a/b,c/d")},
		{"leading and trailing whitespace is trimmed", hdr("Accept", " \ta/b\t "), hdr("Accept", "a/b")},
		{"field lines combine like a comma list", hdr("Accept", "a/b", "Accept", "c/d"), hdr("Accept", "a/b, c/d")},
		{"another Header kind gives the same key", entryHeader{{"accept", "a/b"}, {"ACCEPT-ENCODING", "gzip"}},
			hdr("Accept", "a/b", "Accept-Encoding", "gzip")},
		{"unrelated fields do not matter", hdr("Accept", "a/b", "Cookie", "x=1"), hdr("Accept", "a/b", "Cookie", "x=2")},
	}
	for _, tt := range same {
		t.Run(tt.name, func(t *testing.T) {
			if ka, kb := key(tt.a), key(tt.b); ka != kb {
				t.Errorf("keys differ: %q vs %q", ka, kb)
			}
		})
	}
	differ := []struct {
		name string
		a, b httpcache.Header
	}{
		{"an absent field differs from an empty one", hdr(), hdr("Accept", "")},
		{"an absent field differs from an empty second one", hdr("Accept", "x"), hdr("Accept", "x", "Accept-Encoding", "")},
		{"values differ", hdr("Accept", "a/b"), hdr("Accept", "a/c")},
		{"value case matters", hdr("Accept", "A/B"), hdr("Accept", "a/b")},
		{"inner whitespace matters", hdr("Accept", "a b"), hdr("Accept", "ab")},
		{"an empty list element matters", hdr("Accept", "a,,b"), hdr("Accept", "a,b")},
		{"a value cannot spill into the next field", hdr("Accept", "x\x00\x01"), hdr("Accept", "x", "Accept-Encoding", "")},
		{"a NUL in a value cannot fake the absent marker", hdr("Accept", "\x01"), hdr()},
		{"escapes do not collide", hdr("Accept", "\x00"), hdr("Accept", "\x010")},
		{"values do not move between fields", hdr("Accept", "gzip"), hdr("Accept-Encoding", "gzip")},
	}
	for _, tt := range differ {
		t.Run(tt.name, func(t *testing.T) {
			if ka, kb := key(tt.a), key(tt.b); ka == kb {
				t.Errorf("keys are equal: %q", ka)
			}
		})
	}
}

func TestAppendVaryKeyFormat(t *testing.T) {
	got := httpcache.AppendVaryKey([]byte("prefix|"), []string{"Accept", "x-absent", "x-empty"},
		hdr("Accept", "a , b", "Accept", "c", "X-Empty", ""))
	want := []byte("prefix|accept\x00a,b,c\x00x-absent\x00\x01\x00x-empty\x00\x00")
	if !bytes.Equal(got, want) {
		t.Errorf("AppendVaryKey = %q, want %q", got, want)
	}
	if got := httpcache.AppendVaryKey(nil, nil, hdr("Accept", "x")); len(got) != 0 {
		t.Errorf("no names: %q", got)
	}
	if got := httpcache.AppendVaryKey(nil, []string{"accept"}, nil); !bytes.Equal(got, []byte("accept\x00\x01\x00")) {
		t.Errorf("nil Header: %q", got)
	}
}

func TestAppendVaryKeyNameCaseDoesNotMatter(t *testing.T) {
	h := hdr("Accept-Encoding", "gzip")
	a := httpcache.AppendVaryKey(nil, []string{"ACCEPT-encoding"}, h)
	b := httpcache.AppendVaryKey(nil, []string{"accept-encoding"}, h)
	if !bytes.Equal(a, b) || !bytes.Contains(a, []byte("gzip")) {
		t.Errorf("keys %q and %q", a, b)
	}
}

func TestAppendVaryKeyOddNames(t *testing.T) {
	// Names CanonicalMIMEHeaderKey leaves alone, and very long ones, are
	// looked up through Values.
	long := string(bytes.Repeat([]byte("x-long-"), 20))
	h := http.Header{"bad name": {"1"}, http.CanonicalHeaderKey(long): {"2"}}
	got := httpcache.AppendVaryKey(nil, []string{"bad name", long}, h)
	want := "bad name\x001\x00" + long + "\x002\x00"
	if string(got) != want {
		t.Errorf("AppendVaryKey = %q, want %q", got, want)
	}
}
