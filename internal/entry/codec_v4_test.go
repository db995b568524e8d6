package entry

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"testing"
)

func fileID(b byte) [16]byte {
	var id [16]byte
	for i := range id {
		id[i] = b
	}
	return id
}

// pieceCases are partial responses in body files (version 4).
func pieceCases() map[string]*Entry {
	typical := sampleEntry()
	typical.Kind = KindPartial
	typical.Body = nil
	typical.Partial = &Partial{Length: 1 << 30, Pieces: []Piece{
		{Span: Span{0, 999}, File: BodyFile{ID: fileID(1), Size: 1000, CRC: 7}},
		{Span: Span{1000, 1999}, File: BodyFile{ID: fileID(2), Size: 5000, CRC: 8}, Offset: 4000},
		{Span: Span{3000, 3099}, File: BodyFile{ID: fileID(1), Size: 1000, CRC: 7}, Offset: 900},
	}}
	max := make([]Piece, MaxPieces)
	for i := range max {
		max[i] = Piece{Span: Span{int64(i) * 10, int64(i)*10 + 4}, File: BodyFile{ID: fileID(byte(i)), Size: 5}}
	}
	return map[string]*Entry{
		"a typical pieced response, one file split in two": typical,
		"one byte in one file": {
			Kind: KindPartial, Status: 200,
			Partial: &Partial{Length: 1, Pieces: []Piece{{Span: Span{0, 0}, File: BodyFile{ID: fileID(9), Size: 1}}}},
		},
		"the most pieces an entry may have": {Kind: KindPartial, Status: 200, Partial: &Partial{Length: int64(MaxPieces) * 10, Pieces: max}},
		"the tail of a huge representation": {
			Kind: KindPartial, Status: 200,
			Partial: &Partial{Length: math.MaxInt64, Pieces: []Piece{{
				Span: Span{math.MaxInt64 - 3, math.MaxInt64 - 1},
				File: BodyFile{ID: fileID(3), Size: math.MaxInt64}, Offset: math.MaxInt64 - 3,
			}}},
		},
	}
}

func TestPiecedEntriesRoundTrip(t *testing.T) {
	for name, want := range pieceCases() {
		t.Run(name, func(t *testing.T) {
			got := roundTrip(t, want, 4)
			if got.Body != nil || got.File != nil || len(got.Partial.Spans) != 0 {
				t.Fatalf("a pieced entry decoded with Body %q, File %+v, Spans %v", got.Body, got.File, got.Partial.Spans)
			}
		})
	}
}

// An inline partial entry encodes as version 3 byte for byte as before
// pieces existed: a Pieces field left empty changes nothing.
func TestAnInlinePartialEntryIsStillVersion3(t *testing.T) {
	e := partialCases()["a typical partial response with three spans"]
	b := Encode(nil, e)
	e.Partial.Pieces = []Piece{}
	if b[offVersion] != 3 || !bytes.Equal(Encode(nil, e), b) {
		t.Fatalf("version %d; an empty Pieces changed the encoding", b[offVersion])
	}
}

// sealedV4 builds a version 4 value of kind with a correct checksum: an
// empty identity and header list, a body of bodyLen (no bytes), then tail.
func sealedV4(kind Kind, bodyLen uint64, tail ...[]byte) []byte {
	b := sealed(uv(0), uv(0), uv(0), uv(0), uv(0), uv(bodyLen))
	b[offVersion] = versionV4
	b[offKind] = byte(kind)
	for _, v := range tail {
		b = append(b, v...)
	}
	binary.LittleEndian.PutUint32(b[offCRC:], crcOf(b))
	return b
}

// pc is one encoded piece: start, end, offset, then a file of size bytes.
func pc(start, end, offset, size uint64) []byte {
	out := append(uv(start), uv(end)...)
	out = append(out, uv(offset)...)
	id := fileID(byte(start))
	out = append(out, id[:]...)
	out = binary.LittleEndian.AppendUint64(out, size)
	return binary.LittleEndian.AppendUint32(out, 0xfeed)
}

func TestPiecedEntryDecodeDecisions(t *testing.T) {
	many := uv(MaxPieces + 1)
	for i := range uint64(MaxPieces + 1) {
		many = append(many, pc(i*2, i*2, 0, 1)...)
	}
	tests := map[string]struct {
		in   []byte
		want error
	}{
		"one piece decodes": {sealedV4(KindPartial, 0, uv(10), uv(1), pc(5, 9, 0, 5)), nil},
		"adjacent pieces decode (each has its own file)": {sealedV4(KindPartial, 0, uv(10), uv(2), pc(0, 4, 0, 5), pc(5, 9, 0, 5)), nil},
		"a piece from inside its file decodes":           {sealedV4(KindPartial, 0, uv(10), uv(1), pc(5, 9, 95, 100)), nil},
		"overlapping pieces are corrupt":                 {sealedV4(KindPartial, 0, uv(10), uv(2), pc(0, 4, 0, 5), pc(4, 9, 0, 6)), ErrCorrupt},
		"pieces out of order are corrupt":                {sealedV4(KindPartial, 0, uv(10), uv(2), pc(5, 9, 0, 5), pc(0, 4, 0, 5)), ErrCorrupt},
		"a piece past the complete length is corrupt":    {sealedV4(KindPartial, 0, uv(9), uv(1), pc(5, 9, 0, 5)), ErrCorrupt},
		"a reversed piece is corrupt":                    {sealedV4(KindPartial, 0, uv(10), uv(1), pc(9, 5, 0, 5)), ErrCorrupt},
		"an offset past the file's size is corrupt":      {sealedV4(KindPartial, 0, uv(10), uv(1), pc(5, 9, 6, 5)), ErrCorrupt},
		"a span running past the file's end is corrupt":  {sealedV4(KindPartial, 0, uv(10), uv(1), pc(5, 9, 1, 5)), ErrCorrupt},
		"a file size past int64 is corrupt":              {sealedV4(KindPartial, 0, uv(10), uv(1), pc(5, 9, 0, math.MaxUint64)), ErrCorrupt},
		"more pieces than MaxPieces are corrupt":         {sealedV4(KindPartial, 0, uv(1000), many), ErrCorrupt},
		"no piece at all is corrupt":                     {sealedV4(KindPartial, 0, uv(10), uv(0)), ErrCorrupt},
		"a zero complete length is corrupt":              {sealedV4(KindPartial, 0, uv(0), uv(1), pc(0, 0, 0, 1)), ErrCorrupt},
		"a piece cut short is corrupt":                   {sealedV4(KindPartial, 0, uv(10), uv(1), pc(5, 9, 0, 5)[:10]), ErrCorrupt},
		"bytes after the pieces are corrupt":             {sealedV4(KindPartial, 0, uv(10), uv(1), pc(5, 9, 0, 5), []byte{0}), ErrCorrupt},
		"an inline body in a pieced value is corrupt":    {sealedV4(KindPartial, 1, []byte("x"), uv(10), uv(1), pc(5, 9, 0, 5)), ErrCorrupt},
		"a complete response labelled version 4 is corrupt": {
			sealedV4(KindResponse, 0, uv(10), uv(1), pc(5, 9, 0, 5)), ErrCorrupt},
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
			if err == nil && (got.Kind != KindPartial || got.Partial.Length != 10 || len(got.Partial.Pieces) == 0) {
				t.Fatalf("Kind %d, Partial %+v", got.Kind, got.Partial)
			}
		})
	}
}

// Decoding pieces into an Entry that has them allocates nothing, and an
// inline partial entry decoded over a pieced one keeps no piece (and the
// other way round).
func TestDecodeReusesThePieces(t *testing.T) {
	pieced := Encode(nil, pieceCases()["a typical pieced response, one file split in two"])
	inline := Encode(nil, partialCases()["a typical partial response with three spans"])
	var e Entry
	if err := Decode(pieced, &e); err != nil {
		t.Fatal(err)
	}
	if allocs := testing.AllocsPerRun(100, func() {
		if err := Decode(pieced, &e); err != nil {
			t.Fatal(err)
		}
	}); allocs != 0 {
		t.Errorf("Decode of a pieced entry into an Entry with pieces: %v allocs, want 0", allocs)
	}
	if err := Decode(inline, &e); err != nil {
		t.Fatal(err)
	}
	if len(e.Partial.Pieces) != 0 || len(e.Partial.Spans) != 3 {
		t.Fatalf("an inline partial entry decoded over a pieced one: %+v", e.Partial)
	}
	if err := Decode(pieced, &e); err != nil {
		t.Fatal(err)
	}
	if len(e.Partial.Spans) != 0 || len(e.Partial.Pieces) != 3 || e.Body != nil {
		t.Fatalf("a pieced entry decoded over an inline one: %+v, body %q", e.Partial, e.Body)
	}
}

func TestRefersTo(t *testing.T) {
	e := pieceCases()["a typical pieced response, one file split in two"]
	for _, tt := range []struct {
		name string
		e    *Entry
		id   [16]byte
		want bool
	}{
		{"a piece's file is referred to", e, fileID(2), true},
		{"a file no piece names is not", e, fileID(5), false},
		{"a complete response's file is referred to", &Entry{Kind: KindResponse, File: &BodyFile{ID: fileID(5)}}, fileID(5), true},
		{"an inline response refers to no file", sampleEntry(), fileID(0), false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.e.RefersTo(tt.id); got != tt.want {
				t.Fatalf("RefersTo = %v, want %v", got, tt.want)
			}
		})
	}
}
