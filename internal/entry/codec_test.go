package entry

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"slices"
	"strings"
	"testing"
	"time"
)

// sampleEntry is a typical stored response: ~6 headers and a 1 KiB body.
func sampleEntry() *Entry {
	now := time.Date(2025, 3, 1, 12, 0, 0, 123456789, time.UTC)
	return &Entry{
		Kind:   KindResponse,
		Flags:  FlagNoCache,
		Host:   "shop.example.com",
		Target: "/api/products/42?lang=en",
		Status: 200,
		Header: []Field{
			{"Cache-Control", "public, max-age=300, stale-while-revalidate=60"},
			{"Content-Type", "application/json; charset=utf-8"},
			{"Date", "Sat, 01 Mar 2025 12:00:00 GMT"},
			{"Etag", `"5f2b-1a2b3c4d"`},
			{"Last-Modified", "Fri, 28 Feb 2025 09:30:00 GMT"},
			{"Vary", "Accept-Encoding"},
		},
		Body:                 bytes.Repeat([]byte("0123456789abcdef"), 64),
		RequestTime:          now.Add(-25 * time.Millisecond),
		ResponseTime:         now,
		InitialAge:           2 * time.Second,
		Lifetime:             300 * time.Second,
		StaleWhileRevalidate: 60 * time.Second,
		StaleIfError:         time.Hour,
	}
}

func manyHeaders(n int) []Field {
	h := make([]Field, n)
	for i := range h {
		h[i] = Field{Name: fmt.Sprintf("X-Header-%d", i), Value: strings.Repeat("v", i%300)}
	}
	return h
}

// roundTripCases covers every field, zero values and lengths whose
// varints take more than one byte.
func roundTripCases() map[string]*Entry {
	long := time.Date(1700, 1, 1, 0, 0, 0, 1, time.UTC)
	return map[string]*Entry{
		"the zero entry":     {},
		"a typical response": sampleEntry(),
		"a response with an empty body and no headers": {
			Kind: KindResponse, Host: "a", Target: "/", Status: 204,
			ResponseTime: time.Unix(1700000000, 0).UTC(),
		},
		"a response with many headers and a 200 KiB body": {
			Kind: KindResponse, Host: "h:8080", Target: "/" + strings.Repeat("p", 500),
			Status: 200, Header: manyHeaders(1000),
			Body: bytes.Repeat([]byte{0, 1, 0xff}, 200<<10/3),
		},
		"a response with tags": {
			Kind: KindResponse, Host: "h", Target: "/t", Status: 200,
			Tags: []string{"product-42", "catalog", "", strings.Repeat("t", 200)},
			Body: []byte("x"),
		},
		"a vary marker": {
			Kind: KindVary, Host: "h", Target: "/v?x=1",
			Vary: []string{"accept-encoding", "accept-language"}, Nonce: math.MaxUint64,
			ResponseTime: time.Unix(1, 2).UTC(), Lifetime: time.Minute,
		},
		"an uncacheable marker": {
			Kind: KindUncacheable, Host: "h", Target: "/u",
			ResponseTime: time.Unix(1700000000, 5).UTC(), Lifetime: 2 * time.Minute,
		},
		"every flag, extreme durations and statuses": {
			Kind: Kind(0xff), Flags: Flag(0xffff), Status: 65535,
			InitialAge: math.MinInt64, Lifetime: math.MaxInt64,
			StaleWhileRevalidate: -1, StaleIfError: 1,
			RequestTime: long, ResponseTime: time.Unix(0, math.MaxInt64).UTC(),
		},
		"the unix epoch is not the zero time": {
			RequestTime: time.Unix(0, 0).UTC(), ResponseTime: time.Unix(0, math.MinInt64+1).UTC(),
		},
		"binary bytes in strings": {
			Host: "\x00\xff", Target: "/\x80", Header: []Field{{"", ""}, {"\x00", "\xff\xfe"}},
			Tags: []string{"\x00"}, Vary: []string{""},
		},
	}
}

// equalEntries compares as the codec defines equality: instants rather
// than time.Time representations, and nil equal to empty.
func equalEntries(a, b *Entry) error {
	switch {
	case a.Kind != b.Kind:
		return fmt.Errorf("Kind %d != %d", a.Kind, b.Kind)
	case a.Flags != b.Flags:
		return fmt.Errorf("Flags %x != %x", a.Flags, b.Flags)
	case a.Status != b.Status:
		return fmt.Errorf("Status %d != %d", a.Status, b.Status)
	case a.Host != b.Host:
		return fmt.Errorf("Host %q != %q", a.Host, b.Host)
	case a.Target != b.Target:
		return fmt.Errorf("Target %q != %q", a.Target, b.Target)
	case a.Nonce != b.Nonce:
		return fmt.Errorf("Nonce %d != %d", a.Nonce, b.Nonce)
	case a.StaleIfUnreachable != b.StaleIfUnreachable:
		return fmt.Errorf("StaleIfUnreachable %v != %v", a.StaleIfUnreachable, b.StaleIfUnreachable)
	case a.DecodedSize != b.DecodedSize:
		return fmt.Errorf("DecodedSize %v != %v", a.DecodedSize, b.DecodedSize)
	case !a.RequestTime.Equal(b.RequestTime) || a.RequestTime.IsZero() != b.RequestTime.IsZero():
		return fmt.Errorf("RequestTime %v != %v", a.RequestTime, b.RequestTime)
	case !a.ResponseTime.Equal(b.ResponseTime) || a.ResponseTime.IsZero() != b.ResponseTime.IsZero():
		return fmt.Errorf("ResponseTime %v != %v", a.ResponseTime, b.ResponseTime)
	case a.InitialAge != b.InitialAge, a.Lifetime != b.Lifetime,
		a.StaleWhileRevalidate != b.StaleWhileRevalidate, a.StaleIfError != b.StaleIfError:
		return fmt.Errorf("durations differ: %v %v %v %v vs %v %v %v %v",
			a.InitialAge, a.Lifetime, a.StaleWhileRevalidate, a.StaleIfError,
			b.InitialAge, b.Lifetime, b.StaleWhileRevalidate, b.StaleIfError)
	case !bytes.Equal(a.Body, b.Body):
		return fmt.Errorf("Body differs (%d vs %d bytes)", len(a.Body), len(b.Body))
	case len(a.Header) != len(b.Header):
		return fmt.Errorf("Header has %d vs %d fields", len(a.Header), len(b.Header))
	case !equalStrings(a.Tags, b.Tags):
		return fmt.Errorf("Tags %q != %q", a.Tags, b.Tags)
	case !equalStrings(a.Vary, b.Vary):
		return fmt.Errorf("Vary %q != %q", a.Vary, b.Vary)
	case (a.File == nil) != (b.File == nil) || a.File != nil && *a.File != *b.File:
		return fmt.Errorf("File %+v != %+v", a.File, b.File)
	case (a.Partial == nil) != (b.Partial == nil) || a.Partial != nil &&
		(a.Partial.Length != b.Partial.Length || !slices.Equal(a.Partial.Spans, b.Partial.Spans) ||
			!slices.Equal(a.Partial.Pieces, b.Partial.Pieces)):
		return fmt.Errorf("Partial %+v != %+v", a.Partial, b.Partial)
	}
	for i := range a.Header {
		if a.Header[i] != b.Header[i] {
			return fmt.Errorf("Header[%d] %q != %q", i, a.Header[i], b.Header[i])
		}
	}
	return nil
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// roundTrip encodes want, checks the size EncodedSize predicts and the
// version byte, decodes it, checks it equals want and that encoding it
// again gives the same bytes, and returns the decoded entry.
func roundTrip(t *testing.T, want *Entry, version byte) *Entry {
	t.Helper()
	b := Encode(nil, want)
	if len(b) != EncodedSize(want) {
		t.Fatalf("len(Encode) = %d, EncodedSize = %d", len(b), EncodedSize(want))
	}
	if b[offVersion] != version {
		t.Fatalf("version byte %d, want %d", b[offVersion], version)
	}
	var got Entry
	if err := Decode(b, &got); err != nil {
		t.Fatalf("Decode: %v", err)
	}
	if err := equalEntries(want, &got); err != nil {
		t.Fatal(err)
	}
	if again := Encode(nil, &got); !bytes.Equal(again, b) {
		t.Fatal("re-encoding the decoded entry changed the bytes")
	}
	return &got
}

func TestRoundTrip(t *testing.T) {
	for name, want := range roundTripCases() {
		t.Run(name, func(t *testing.T) {
			roundTrip(t, want, 1)
		})
	}
}

func TestEncodeAppendsToDst(t *testing.T) {
	e := sampleEntry()
	prefix := []byte("prefix")
	b := Encode(prefix, e)
	if string(b[:len(prefix)]) != "prefix" {
		t.Fatalf("prefix clobbered: %q", b[:len(prefix)])
	}
	var got Entry
	if err := Decode(b[len(prefix):], &got); err != nil {
		t.Fatal(err)
	}

	buf := make([]byte, 3, 3+EncodedSize(e))
	if allocs := testing.AllocsPerRun(100, func() { Encode(buf, e) }); allocs != 0 {
		t.Errorf("Encode into a buffer with capacity: %v allocs, want 0", allocs)
	}
}

func TestOutOfRangeTimesAreClamped(t *testing.T) {
	e := &Entry{
		RequestTime:  time.Date(1, 1, 2, 0, 0, 0, 0, time.UTC),
		ResponseTime: time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC),
	}
	var got Entry
	if err := Decode(Encode(nil, e), &got); err != nil {
		t.Fatal(err)
	}
	if got.RequestTime.IsZero() || got.RequestTime.Year() != 1677 {
		t.Errorf("RequestTime = %v, want clamped to 1677 (and not zero)", got.RequestTime)
	}
	if got.ResponseTime.Year() != 2262 {
		t.Errorf("ResponseTime = %v, want clamped to 2262", got.ResponseTime)
	}
}

func TestEveryTruncationFails(t *testing.T) {
	for name, e := range roundTripCases() {
		t.Run(name, func(t *testing.T) {
			b := Encode(nil, e)
			var got Entry
			for i := range len(b) {
				// Big values: every cut in the first 4 KiB and the last 64
				// bytes, a sample between (all cuts inside the body are
				// alike; the full sweep is quadratic).
				if i > 4096 && len(b)-i > 64 && i%997 != 0 {
					continue
				}
				want := ErrCorrupt
				if i < len(magic) {
					want = ErrNotEntry
				}
				// A fresh copy of exactly i bytes, so any read past the
				// end would fault rather than see the rest of b.
				err := Decode(bytes.Clone(b[:i]), &got)
				if !errors.Is(err, want) {
					t.Fatalf("Decode(first %d of %d bytes) = %v, want %v", i, len(b), err, want)
				}
			}
		})
	}
}

// Every version's checksum catches any single flipped bit.
func TestAnyFlippedBitFails(t *testing.T) {
	inline := sampleEntry()
	inline.Body = inline.Body[:100]
	inline.Tags = []string{"a", "b"}
	for name, e := range map[string]*Entry{
		"an inline response (v1)":         inline,
		"a response in a file (v2)":       fileCases()["a typical response with its body in a file"],
		"an inline partial response (v3)": partialCases()["a typical partial response with three spans"],
		"a pieced partial response (v4)":  pieceCases()["a typical pieced response, one file split in two"],
	} {
		t.Run(name, func(t *testing.T) {
			b := Encode(nil, e)
			var got Entry
			for i := range b {
				for bit := range 8 {
					c := bytes.Clone(b)
					c[i] ^= 1 << bit
					if err := Decode(c, &got); err == nil {
						t.Fatalf("flipping bit %d of byte %d went unnoticed", bit, i)
					}
				}
			}
		})
	}
}

func TestForeignAndVersionedValues(t *testing.T) {
	valid := Encode(nil, sampleEntry())
	withVersion := func(v byte) []byte {
		c := bytes.Clone(valid)
		c[offVersion] = v
		return c
	}
	tests := map[string]struct {
		in   []byte
		want error
	}{
		"nil is not an entry":                              {nil, ErrNotEntry},
		"a JSON document is not an entry":                  {[]byte(`{"status":200}`), ErrNotEntry},
		"a value with a wrong magic is not an entry":       {append([]byte("TCX"), valid[3:]...), ErrNotEntry},
		"the magic alone is corrupt":                       {[]byte("TCE"), ErrCorrupt},
		"a newer version is unsupported":                   {withVersion(7), ErrVersion},
		"an uncoded value relabelled version 5 is corrupt": {withVersion(5), ErrCorrupt},
		"an inline value relabelled version 2 is corrupt":  {withVersion(2), ErrCorrupt},
		"an inline value relabelled version 3 is corrupt":  {withVersion(3), ErrCorrupt},
		"an inline value relabelled version 4 is corrupt":  {withVersion(4), ErrCorrupt},
		"version zero is unsupported":                      {withVersion(0), ErrVersion},
		"a header without the fixed fields is corrupt":     {valid[:fixedSize-1], ErrCorrupt},
		"trailing bytes are corrupt":                       {append(bytes.Clone(valid), 0), ErrCorrupt},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			var got Entry
			if err := Decode(tt.in, &got); !errors.Is(err, tt.want) {
				t.Fatalf("Decode = %v, want %v", err, tt.want)
			}
		})
	}
}

// sealed builds a value with a correct checksum around an arbitrary
// variable part, to reach the bounds checks behind the CRC.
func sealed(variable ...[]byte) []byte {
	b := make([]byte, fixedSize)
	copy(b, magic)
	b[offVersion] = version
	for _, v := range variable {
		b = append(b, v...)
	}
	binary.LittleEndian.PutUint32(b[offCRC:], crc32.Checksum(b[offKind:], castagnoli))
	return b
}

func uv(v uint64) []byte { return binary.AppendUvarint(nil, v) }

func TestLyingLengthsBehindAValidChecksum(t *testing.T) {
	empty := uv(0)
	tests := map[string][]byte{
		"a host longer than the value":         sealed(uv(1000), []byte("abc")),
		"a huge host length":                   sealed(uv(math.MaxUint64)),
		"an overlong varint":                   sealed(bytes.Repeat([]byte{0xff}, 11)),
		"a varint cut short":                   sealed([]byte{0x80}),
		"a tag count larger than the value":    sealed(empty, empty, uv(1<<40)),
		"a vary count larger than the value":   sealed(empty, empty, empty, uv(5), empty),
		"a header count of a billion":          sealed(empty, empty, empty, empty, uv(1e9), empty, empty),
		"a header count beyond half the rest":  sealed(empty, empty, empty, empty, uv(3), empty, empty, empty, empty, empty),
		"a header value cut short":             sealed(empty, empty, empty, empty, uv(1), empty, uv(4), []byte("ab")),
		"a body longer than the value":         sealed(empty, empty, empty, empty, empty, uv(10), []byte("short")),
		"a value that ends before the body":    sealed(empty, empty, empty, empty, empty),
		"a value that ends inside the strings": sealed(empty),
	}
	for name, b := range tests {
		t.Run(name, func(t *testing.T) {
			var got Entry
			if err := Decode(b, &got); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("Decode = %v, want ErrCorrupt", err)
			}
			allocs := testing.AllocsPerRun(10, func() { _ = Decode(b, &got) })
			if allocs != 0 {
				t.Fatalf("rejecting it allocated %v times", allocs)
			}
		})
	}
	// And the shortest valid variable part decodes.
	var got Entry
	if err := Decode(sealed(empty, empty, empty, empty, empty, empty), &got); err != nil {
		t.Fatalf("minimal value: %v", err)
	}
}

func TestDecodeReusesTheEntry(t *testing.T) {
	big := sampleEntry()
	big.Header = manyHeaders(20)
	big.Tags = []string{"a", "b", "c"}
	small := sampleEntry()
	small.Tags = []string{"z"}
	bigEnc, smallEnc := Encode(nil, big), Encode(nil, small)

	var e Entry
	if err := Decode(bigEnc, &e); err != nil {
		t.Fatal(err)
	}
	if allocs := testing.AllocsPerRun(100, func() {
		if err := Decode(smallEnc, &e); err != nil {
			t.Fatal(err)
		}
	}); allocs != 0 {
		t.Errorf("Decode into an Entry with capacity: %v allocs, want 0", allocs)
	}
	if err := equalEntries(small, &e); err != nil {
		t.Fatal(err)
	}

	if err := Decode(smallEnc[:100], &e); err == nil {
		t.Fatal("truncated value decoded")
	}
	if e.Host != "" || len(e.Header) != 0 || e.Body != nil || e.Status != 0 {
		t.Fatalf("a failed Decode left data behind: %+v", e)
	}
}

func TestDecodeAllocations(t *testing.T) {
	b := Encode(nil, sampleEntry())
	allocs := testing.AllocsPerRun(1000, func() {
		var e Entry
		if err := Decode(b, &e); err != nil {
			t.Fatal(err)
		}
	})
	if allocs > 1 {
		t.Errorf("Decode of a typical response: %v allocs, want <= 1 (the header slice)", allocs)
	}

	tagged := sampleEntry()
	tagged.Tags = []string{"a", "b"}
	tagged.Vary = []string{"accept"}
	b = Encode(nil, tagged)
	allocs = testing.AllocsPerRun(1000, func() {
		var e Entry
		if err := Decode(b, &e); err != nil {
			t.Fatal(err)
		}
	})
	if allocs > 3 {
		t.Errorf("Decode with tags and vary: %v allocs, want <= 3", allocs)
	}
}

func TestDecodedStringsAliasTheInput(t *testing.T) {
	b := Encode(nil, sampleEntry())
	var e Entry
	if err := Decode(b, &e); err != nil {
		t.Fatal(err)
	}
	// Overwrite the input: aliased fields change with it.
	i := bytes.Index(b, []byte("shop.example.com"))
	b[i] = 'S'
	if e.Host[0] != 'S' {
		t.Fatal("Host was copied rather than aliased")
	}
}

func FuzzDecode(f *testing.F) {
	for _, e := range roundTripCases() {
		if EncodedSize(e) < 4096 {
			f.Add(Encode(nil, e))
		}
	}
	for _, e := range fileCases() {
		f.Add(Encode(nil, e))
	}
	for _, e := range partialCases() {
		f.Add(Encode(nil, e))
	}
	for _, e := range pieceCases() {
		f.Add(Encode(nil, e))
	}
	f.Add([]byte("TCE\x01"))
	f.Add([]byte("TCE\x02"))
	f.Add(sealed(uv(0), uv(0), uv(1), uv(0), uv(1), uv(1), uv(1), uv(1), uv(1), uv(1), uv(0)))
	f.Fuzz(func(t *testing.T, b []byte) {
		var e Entry
		if err := Decode(b, &e); err != nil {
			if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrVersion) && !errors.Is(err, ErrNotEntry) {
				t.Fatalf("unclassified error %v", err)
			}
			return
		}
		enc := Encode(nil, &e)
		if len(enc) != EncodedSize(&e) {
			t.Fatalf("EncodedSize %d != len(Encode) %d", EncodedSize(&e), len(enc))
		}
		var again Entry
		if err := Decode(enc, &again); err != nil {
			t.Fatalf("re-encoded entry does not decode: %v", err)
		}
		if err := equalEntries(&e, &again); err != nil {
			t.Fatalf("round trip changed the entry: %v", err)
		}
	})
}

func BenchmarkEncode(b *testing.B) {
	e := sampleEntry()
	buf := make([]byte, 0, EncodedSize(e))
	b.ReportAllocs()
	b.SetBytes(int64(EncodedSize(e)))
	for b.Loop() {
		buf = Encode(buf[:0], e)
	}
}

// ballast stands in for the sidecar's heap (L1's queues are a large
// pointer-free allocation), so the GC runs at the pace it would there.
// Without it a benchmark's 4 MiB heap is collected every ~20k decodes, and
// on a busy 2-vCPU VM each cycle costs more than those decodes.
var ballast []byte

func withBallast(b *testing.B) {
	ballast = make([]byte, 64<<20)
	b.Cleanup(func() { ballast = nil })
}

// BenchmarkDecode is the hit path: a 1 KiB body and 6 headers into a
// fresh Entry (one allocation, the header slice).
func BenchmarkDecode(b *testing.B) {
	withBallast(b)
	enc := Encode(nil, sampleEntry())
	b.ReportAllocs()
	b.SetBytes(int64(len(enc)))
	for b.Loop() {
		var e Entry
		if err := Decode(enc, &e); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecodeReuse decodes into an Entry with header capacity: no
// allocation, so this is the parsing and checksum alone.
func BenchmarkDecodeReuse(b *testing.B) {
	enc := Encode(nil, sampleEntry())
	var e Entry
	b.ReportAllocs()
	for b.Loop() {
		if err := Decode(enc, &e); err != nil {
			b.Fatal(err)
		}
	}
}

// The slot at offset 61 holds a marker's nonce and a response's
// stale-if-unreachable window: each kind keeps its own through the codec,
// and a response written before the window existed (slot 0) has none.
func TestSlot61PerKind(t *testing.T) {
	resp := &Entry{Kind: KindResponse, Status: 200, StaleIfUnreachable: 10 * time.Minute, Nonce: 7}
	var got Entry
	if err := Decode(Encode(nil, resp), &got); err != nil {
		t.Fatal(err)
	}
	want := *resp
	want.Nonce = 0
	if err := equalEntries(&want, &got); err != nil {
		t.Errorf("response round trip: %v", err)
	}
	if got.StaleIfUnreachable != 10*time.Minute || got.Nonce != 0 {
		t.Errorf("response: window %v, nonce %d; want 10m0s and 0 (a response has no nonce)", got.StaleIfUnreachable, got.Nonce)
	}
	marker := &Entry{Kind: KindVary, Vary: []string{"accept"}, Nonce: 42, StaleIfUnreachable: time.Hour}
	if err := Decode(Encode(nil, marker), &got); err != nil {
		t.Fatal(err)
	}
	if got.Nonce != 42 || got.StaleIfUnreachable != 0 {
		t.Errorf("marker: nonce %d, window %v; want 42 and 0", got.Nonce, got.StaleIfUnreachable)
	}
	// An older writer's response: the same bytes with a zero slot.
	old := Encode(nil, &Entry{Kind: KindResponse, Status: 200})
	if err := Decode(old, &got); err != nil || got.StaleIfUnreachable != 0 {
		t.Errorf("older response: window %v, err %v; want 0", got.StaleIfUnreachable, err)
	}
	if !bytes.Equal(old, Encode(nil, &Entry{Kind: KindResponse, Status: 200, StaleIfUnreachable: 0})) {
		t.Error("a response without a window does not encode as before")
	}
}

func TestStaleDeadlineTakesTheLongestWindow(t *testing.T) {
	base := time.Unix(1700000000, 0)
	tests := []struct {
		name string
		e    Entry
		want time.Time
	}{
		{"without windows it is the end of freshness", Entry{ResponseTime: base, Lifetime: time.Minute}, base.Add(time.Minute)},
		{"stale-if-unreachable longer than the others wins",
			Entry{ResponseTime: base, Lifetime: time.Minute, StaleWhileRevalidate: time.Second, StaleIfError: 2 * time.Second,
				StaleIfUnreachable: 10 * time.Minute}, base.Add(11 * time.Minute)},
		{"a longer stale-if-error wins over stale-if-unreachable",
			Entry{ResponseTime: base, Lifetime: time.Minute, StaleIfError: time.Hour, StaleIfUnreachable: 10 * time.Minute},
			base.Add(61 * time.Minute)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.e.StaleDeadline(); !got.Equal(tt.want) {
				t.Errorf("StaleDeadline = %v, want %v", got, tt.want)
			}
			if got := tt.e.FreshUntil(); !got.Equal(base.Add(time.Minute)) {
				t.Errorf("FreshUntil = %v: a stale window must not move the end of freshness", got)
			}
		})
	}
}
