package entry

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"testing"
)

// partialCases are partial responses (version 3).
func partialCases() map[string]*Entry {
	typical := sampleEntry()
	typical.Kind = KindPartial
	typical.Body = bytes.Repeat([]byte("p"), 300)
	typical.Partial = &Partial{Length: 10_000, Spans: []Span{{0, 99}, {5000, 5099}, {9900, 9999}}}
	return map[string]*Entry{
		"a typical partial response with three spans": typical,
		"one byte of a one-byte representation": {
			Kind: KindPartial, Status: 200, Body: []byte("x"), Partial: &Partial{Length: 1, Spans: []Span{{0, 0}}},
		},
		"the tail of a huge representation": {
			Kind: KindPartial, Status: 200, Body: []byte("end"),
			Partial: &Partial{Length: math.MaxInt64, Spans: []Span{{math.MaxInt64 - 3, math.MaxInt64 - 1}}},
		},
	}
}

func TestPartialEntriesRoundTrip(t *testing.T) {
	for name, want := range partialCases() {
		t.Run(name, func(t *testing.T) {
			roundTrip(t, want, 3)
		})
	}
}

// sealedV3 builds a version 3 value of kind with a correct checksum: an
// empty identity and header list, body as the body, then tail.
func sealedV3(kind Kind, body []byte, tail ...[]byte) []byte {
	b := sealed(uv(0), uv(0), uv(0), uv(0), uv(0), uv(uint64(len(body))), body)
	b[offVersion] = versionV3
	b[offKind] = byte(kind)
	for _, v := range tail {
		b = append(b, v...)
	}
	binary.LittleEndian.PutUint32(b[offCRC:], crcOf(b))
	return b
}

func spans(s ...uint64) []byte {
	out := uv(uint64(len(s) / 2))
	for _, v := range s {
		out = append(out, uv(v)...)
	}
	return out
}

func TestPartialEntryDecodeDecisions(t *testing.T) {
	five := []byte("01234")
	tests := map[string]struct {
		in   []byte
		want error
	}{
		"one span holding the whole body decodes":           {sealedV3(KindPartial, five, uv(10), spans(5, 9)), nil},
		"two spans summing to the body decode":              {sealedV3(KindPartial, five, uv(10), spans(0, 1, 7, 9)), nil},
		"spans shorter than the body are corrupt":           {sealedV3(KindPartial, five, uv(10), spans(5, 8)), ErrCorrupt},
		"spans longer than the body are corrupt":            {sealedV3(KindPartial, five, uv(10), spans(4, 9)), ErrCorrupt},
		"a span past the complete length is corrupt":        {sealedV3(KindPartial, five, uv(9), spans(5, 9)), ErrCorrupt},
		"a reversed span is corrupt":                        {sealedV3(KindPartial, five, uv(10), spans(9, 5)), ErrCorrupt},
		"overlapping spans are corrupt":                     {sealedV3(KindPartial, five, uv(10), spans(0, 2, 2, 3)), ErrCorrupt},
		"adjacent spans are corrupt (they are one span)":    {sealedV3(KindPartial, five, uv(10), spans(0, 1, 2, 4)), ErrCorrupt},
		"spans out of order are corrupt":                    {sealedV3(KindPartial, five, uv(10), spans(7, 9, 0, 1)), ErrCorrupt},
		"no span at all is corrupt":                         {sealedV3(KindPartial, nil, uv(10), uv(0)), ErrCorrupt},
		"a zero complete length is corrupt":                 {sealedV3(KindPartial, nil, uv(0), spans(0, 0)), ErrCorrupt},
		"a complete length past int64 is corrupt":           {sealedV3(KindPartial, five, uv(math.MaxUint64), spans(0, 4)), ErrCorrupt},
		"a span count larger than the value is corrupt":     {sealedV3(KindPartial, five, uv(10), uv(1<<40)), ErrCorrupt},
		"a tail cut short is corrupt":                       {sealedV3(KindPartial, five, uv(10), spans(5, 9)[:2]), ErrCorrupt},
		"bytes after the spans are corrupt":                 {sealedV3(KindPartial, five, uv(10), spans(5, 9), []byte{0}), ErrCorrupt},
		"a missing tail is corrupt":                         {sealedV3(KindPartial, five), ErrCorrupt},
		"a body longer than the value is corrupt":           {sealedV3(KindPartial, nil, uv(100)), ErrCorrupt},
		"a complete response labelled version 3 is corrupt": {sealedV3(KindResponse, five, uv(10), spans(5, 9)), ErrCorrupt},
		"a partial kind in a version 1 value is corrupt": {func() []byte {
			b := sealed(uv(0), uv(0), uv(0), uv(0), uv(0), uv(0))
			b[offKind] = byte(KindPartial)
			binary.LittleEndian.PutUint32(b[offCRC:], crcOf(b))
			return b
		}(), ErrCorrupt},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			var got Entry
			err := Decode(tt.in, &got)
			if !errors.Is(err, tt.want) {
				t.Fatalf("Decode = %v, want %v", err, tt.want)
			}
			if err != nil && (got.Partial != nil || got.Body != nil) {
				t.Fatalf("a failed Decode left Partial %+v, Body %q", got.Partial, got.Body)
			}
			if err == nil {
				var held int64
				for _, s := range got.Partial.Spans {
					held += s.Len()
				}
				if got.Kind != KindPartial || got.Partial.Length != 10 || held != int64(len(got.Body)) {
					t.Fatalf("Kind %d, Partial %+v, %d body bytes", got.Kind, got.Partial, len(got.Body))
				}
			}
		})
	}
}

func TestDecodeReusesThePartial(t *testing.T) {
	partEnc := Encode(nil, partialCases()["a typical partial response with three spans"])
	inlineEnc := Encode(nil, sampleEntry())

	var e Entry
	if err := Decode(partEnc, &e); err != nil {
		t.Fatal(err)
	}
	if allocs := testing.AllocsPerRun(100, func() {
		if err := Decode(partEnc, &e); err != nil {
			t.Fatal(err)
		}
	}); allocs != 0 {
		t.Errorf("Decode of a partial entry into an Entry with a Partial: %v allocs, want 0", allocs)
	}
	if err := Decode(inlineEnc, &e); err != nil {
		t.Fatal(err)
	}
	if e.Partial != nil || e.Kind != KindResponse {
		t.Fatalf("a complete entry decoded over a partial one kept Partial %+v (kind %d)", e.Partial, e.Kind)
	}
}
