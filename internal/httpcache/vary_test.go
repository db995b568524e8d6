package httpcache_test

import (
	"bytes"
	"net/http"
	"reflect"
	"strings"
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
	key := func(h httpcache.Header) string {
		return string(httpcache.AppendVaryKey(nil, names, h, httpcache.VaryOptions{}))
	}
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
		hdr("Accept", "a , b", "Accept", "c", "X-Empty", ""), httpcache.VaryOptions{})
	want := []byte("prefix|accept\x00a,b,c\x00x-absent\x00\x01\x00x-empty\x00\x00")
	if !bytes.Equal(got, want) {
		t.Errorf("AppendVaryKey = %q, want %q", got, want)
	}
	if got := httpcache.AppendVaryKey(nil, nil, hdr("Accept", "x"), httpcache.VaryOptions{}); len(got) != 0 {
		t.Errorf("no names: %q", got)
	}
	if got := httpcache.AppendVaryKey(nil, []string{"accept"}, nil, httpcache.VaryOptions{}); !bytes.Equal(got, []byte("accept\x00\x01\x00")) {
		t.Errorf("nil Header: %q", got)
	}
}

func TestAppendVaryKeyNameCaseDoesNotMatter(t *testing.T) {
	h := hdr("Accept-Encoding", "gzip")
	a := httpcache.AppendVaryKey(nil, []string{"ACCEPT-encoding"}, h, httpcache.VaryOptions{})
	b := httpcache.AppendVaryKey(nil, []string{"accept-encoding"}, h, httpcache.VaryOptions{})
	if !bytes.Equal(a, b) || !bytes.Contains(a, []byte("gzip")) {
		t.Errorf("keys %q and %q", a, b)
	}
}

func TestAppendVaryKeyOddNames(t *testing.T) {
	// Names CanonicalMIMEHeaderKey leaves alone, and very long ones, are
	// looked up through Values.
	long := string(bytes.Repeat([]byte("x-long-"), 20))
	h := http.Header{"bad name": {"1"}, http.CanonicalHeaderKey(long): {"2"}}
	got := httpcache.AppendVaryKey(nil, []string{"bad name", long}, h, httpcache.VaryOptions{})
	want := "bad name\x001\x00" + long + "\x002\x00"
	if string(got) != want {
		t.Errorf("AppendVaryKey = %q, want %q", got, want)
	}
}

// RFC 9111 §4.1: how a value is split over field lines never changes the
// variant it selects, whichever side (the stored response's request or
// the new one) split it, and for each of several selecting fields.
func TestAppendVaryKeySplitLines(t *testing.T) {
	names := []string{"bar", "baz", "foo"}
	key := func(h httpcache.Header) string {
		return string(httpcache.AppendVaryKey(nil, names, h, httpcache.VaryOptions{}))
	}
	tests := []struct {
		name string
		a, b httpcache.Header
	}{
		{"one line with a list equals one line per member", hdr("Foo", "1, 2"), hdr("Foo", "1", "Foo", "2")},
		{"one line per member equals one line with a list", hdr("Foo", "1", "Foo", "2"), hdr("Foo", "1, 2")},
		{"a list without spaces equals lines", hdr("Foo", "1,2,3"), hdr("Foo", "1", "Foo", "2,3")},
		{"a list split differently equals itself", hdr("Foo", "1, 2", "Foo", "3"), hdr("Foo", "1", "Foo", "2 ,3")},
		{"several fields split in different ways select the same variant",
			hdr("Foo", "1, 2", "Bar", "a", "Bar", "b", "Baz", "x, y"),
			hdr("Foo", "1", "Foo", "2", "Bar", "a, b", "Baz", "x", "Baz", "y")},
		{"the stored request's form of another Header kind equals a split request",
			entryHeader{{"Foo", "1, 2"}, {"Bar", "a"}, {"Bar", "b"}}, hdr("Foo", "1", "Foo", "2", "Bar", "a,b")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ka, kb := key(tt.a), key(tt.b)
			if ka != kb {
				t.Errorf("keys differ: %q vs %q", ka, kb)
			}
			for range 3 { // the same bytes every time
				if again := key(tt.a); again != ka {
					t.Fatalf("key changed between runs: %q then %q", ka, again)
				}
			}
		})
	}
	if key(hdr("Foo", "1", "Foo", "2")) == key(hdr("Foo", "2", "Foo", "1")) {
		t.Error("lines in another order select the same variant; the order of members is part of the value")
	}
}

// VaryOptions.NormalizeAcceptLanguage: RFC 9110 §12.5.4 and RFC 4647 §2.
func TestAppendVaryKeyAcceptLanguage(t *testing.T) {
	names := []string{"accept-language"}
	norm := httpcache.VaryOptions{NormalizeAcceptLanguage: true}
	key := func(h httpcache.Header, o httpcache.VaryOptions) string {
		return string(httpcache.AppendVaryKey(nil, names, h, o))
	}
	al := func(lines ...string) http.Header {
		h := http.Header{}
		for _, l := range lines {
			h.Add("Accept-Language", l)
		}
		return h
	}
	same := []struct {
		name string
		a, b http.Header
	}{
		{"the order of equally weighted ranges does not matter", al("en, de"), al("de, en")},
		{"the case of a range does not matter", al("en, de"), al("eN, De")},
		{"spacing does not matter", al("en, de"), al(" en ,   de")},
		{"spacing around the weight does not matter", al("fr ; q=0.5, en"), al("en,fr;q=0.5")},
		{"the weight is compared by value", al("fr;q=0.50"), al("fr;q=0.5")},
		{"a weight of 1 is no weight", al("fr;q=1.000, en"), al("en, fr")},
		{"an upper-case Q is a weight", al("fr;Q=0.5"), al("fr;q=0.5")},
		{"split lines equal one line", al("en", "de;q=0.8"), al("de;q=0.8, en")},
		{"a repeated range counts once", al("en, en, de"), al("de, en")},
		{"empty list elements are ignored", al("en,, de ,"), al("de,en")},
		{"weighted ranges sort by weight whatever their order", al("fr;q=0.5, de;q=0.9, en"), al("en, fr;q=0.5, de;q=0.9")},
		{"region subtags are ranges of their own case", al("en-US, en;q=0.9"), al("EN-us,EN;q=0.9")},
	}
	for _, tt := range same {
		t.Run(tt.name, func(t *testing.T) {
			if ka, kb := key(tt.a, norm), key(tt.b, norm); ka != kb {
				t.Errorf("keys differ: %q vs %q", ka, kb)
			}
		})
	}
	differ := []struct {
		name string
		a, b http.Header
		o    httpcache.VaryOptions
	}{
		{"without the option the order matters", al("en, de"), al("de, en"), httpcache.VaryOptions{}},
		{"without the option the case matters", al("en"), al("EN"), httpcache.VaryOptions{}},
		{"different ranges differ", al("en"), al("de"), norm},
		{"a weight moves a range", al("en, de;q=0.5"), al("de, en;q=0.5"), norm},
		{"a weight of 0 is kept", al("en"), al("en;q=0"), norm},
		{"a range and its region differ", al("en"), al("en-us"), norm},
		{"an invalid value is keyed as received", al("en;q=2"), al("en;q=2.0"), norm},
		{"an invalid value never equals a normalized one", al("EN;x=1"), al("en"), norm},
		{"an absent field differs from an empty one", http.Header{}, al(""), norm},
	}
	for _, tt := range differ {
		t.Run(tt.name, func(t *testing.T) {
			if ka, kb := key(tt.a, tt.o), key(tt.b, tt.o); ka == kb {
				t.Errorf("keys are equal: %q", ka)
			}
		})
	}
	// Other fields are untouched by the option.
	other := []string{"accept"}
	if a, b := httpcache.AppendVaryKey(nil, other, hdr("Accept", "a/b, c/d"), norm),
		httpcache.AppendVaryKey(nil, other, hdr("Accept", "c/d, a/b"), norm); bytes.Equal(a, b) {
		t.Errorf("the option reordered Accept: %q", a)
	}
}

// The normalized form, and what falls back to the value as received.
func TestAppendVaryKeyAcceptLanguageForm(t *testing.T) {
	norm := httpcache.VaryOptions{NormalizeAcceptLanguage: true}
	many := strings.Repeat("en,", 32) + "de"
	tests := []struct {
		name, value, want string
	}{
		{"ranges are lowercased and sorted by weight then name", "fr;q=0.5, EN-us, de;q=0.90",
			"\x012en-us,de;q=0.9,fr;q=0.5"},
		{"a weight of 0 is written as 0", "en;q=0, de", "\x012de,en;q=0"},
		{"a weight of 0.001 keeps its digits", "en;q=0.001", "\x012en;q=0.001"},
		{"the wildcard is a range", "*;q=0.1, en", "\x012en,*;q=0.1"},
		{"a weight above 1 is kept as received", "en;q=1.5", "en;q=1.5"},
		{"a weight with four decimals is kept as received", "en;q=0.1234", "en;q=0.1234"},
		{"a second parameter is kept as received", "en;q=0.5;x=1", "en;q=0.5;x=1"},
		{"a subtag longer than eight letters is kept as received", "englishes", "englishes"},
		{"digits in the first subtag are kept as received", "e1", "e1"},
		{"an empty subtag is kept as received", "en--us", "en--us"},
		{"a value with more than 32 ranges is kept as received", many, many},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := httpcache.AppendVaryKey(nil, []string{"Accept-Language"}, hdr("Accept-Language", tt.value), norm)
			want := "accept-language\x00" + tt.want + "\x00"
			if string(got) != want {
				t.Errorf("AppendVaryKey = %q, want %q", got, want)
			}
		})
	}
}
