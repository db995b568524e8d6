package entry

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"hash/crc32"
	"math"
	"testing"
)

// fileCases are entries whose body is in the body store (version 2).
func fileCases() map[string]*Entry {
	typical := sampleEntry()
	typical.Body = nil
	typical.File = &BodyFile{
		ID:   [16]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16},
		Size: 100 << 10, CRC: 0xdeadbeef, Chunks: 1,
	}
	return map[string]*Entry{
		"a typical response with its body in a file": typical,
		"an empty body in a file":                    {Kind: KindResponse, Status: 200, File: &BodyFile{}},
		"a 1 TiB body kept local to the replica": {
			Kind: KindResponse, Host: "h", Target: "/big", Status: 200,
			File: &BodyFile{ID: [16]byte{0xff}, Size: 1 << 40, CRC: math.MaxUint32, Chunks: 0},
		},
		"the largest size and chunk count": {
			File: &BodyFile{Size: math.MaxInt64, Chunks: math.MaxUint32},
		},
	}
}

// TestVersion1BytesAreUnchanged pins the encoding of entries without a
// file to the bytes the codec wrote before version 2 existed (hashes
// taken from that codec), so old and new sidecars keep sharing them.
func TestVersion1BytesAreUnchanged(t *testing.T) {
	golden := map[string]string{
		"a response with an empty body and no headers":    "c21b9470f2e0e6a196ad5b4883fb0478013ad8568b7f8b72fc6178c377c66d26",
		"a response with many headers and a 200 KiB body": "1a1c3aab4aecf32ff2929afe844c094b60717b410f2952d41fcf4e13d5cd0cba",
		"a response with tags":                            "88cba8ad0e06a1f1b0bb9db8e1c3b08ac970eeb90365a2b581ac848640d912a9",
		"a typical response":                              "8f092b3f817f57547f164bb045dc957bf1a7fdcc367a4112049a78fe633c5b26",
		"a vary marker":                                   "bd6d4a7415454653e6e7395e92d0a21998b51b6049e7e301557654d2a2b7e3b4",
		"an uncacheable marker":                           "3335f1ced3fad35675b42e1cfedcf0630d19f688fc5ddc87d56f866df68a3464",
		"binary bytes in strings":                         "9da5a44ebf2ed06678e3c5dbf79a9ba6be7fc5106baa605cd4f7e8e216766a6e",
		"every flag, extreme durations and statuses":      "e8ae56ebe548e1e4b003bc143b391bcd07a4e4eb5b2a700255baa1b25aecf0c8",
		"the unix epoch is not the zero time":             "72f2df29cb092ded8829ae67d7fd7119517d17f3d8239a0c2bd75e24c37fadf5",
		"the zero entry":                                  "5390d50e9571daed83e30f43f379ac1ca95b885339fe8d7397c8326ae212d868",
	}
	for name, e := range roundTripCases() {
		t.Run(name, func(t *testing.T) {
			b := Encode(nil, e)
			if b[offVersion] != 1 {
				t.Fatalf("version byte %d, want 1", b[offVersion])
			}
			sum := sha256.Sum256(b)
			if got := hex.EncodeToString(sum[:]); got != golden[name] {
				t.Fatalf("sha256 of the encoding = %s, want %s", got, golden[name])
			}
		})
	}
}

func TestFileEntriesRoundTrip(t *testing.T) {
	for name, want := range fileCases() {
		t.Run(name, func(t *testing.T) {
			got := roundTrip(t, want, 2)
			if got.Body != nil {
				t.Fatalf("Body = %q, want nil for a file entry", got.Body)
			}
		})
	}
}

func TestAFileEntryDoesNotEncodeAnInlineBody(t *testing.T) {
	e := sampleEntry() // with a 1 KiB Body
	e.File = &BodyFile{ID: [16]byte{9}, Size: 1024}
	b := Encode(nil, e)
	if bytes.Contains(b, e.Body[:64]) {
		t.Fatal("the inline body was encoded into a version 2 value")
	}
	var got Entry
	if err := Decode(b, &got); err != nil {
		t.Fatal(err)
	}
	if got.Body != nil || got.File == nil || *got.File != *e.File {
		t.Fatalf("decoded Body %d bytes, File %+v; want no body and %+v", len(got.Body), got.File, *e.File)
	}
}

// sealedV2 builds a version 2 value with a correct checksum around an
// arbitrary tail after the header list.
func sealedV2(tail ...[]byte) []byte {
	b := sealed(uv(0), uv(0), uv(0), uv(0), uv(0))
	b[offVersion] = versionV2
	for _, v := range tail {
		b = append(b, v...)
	}
	binary.LittleEndian.PutUint32(b[offCRC:], crcOf(b))
	return b
}

func crcOf(b []byte) uint32 { return crc32.Checksum(b[offKind:], castagnoli) }

func ref(id byte, size int64, crc, chunks uint32) []byte {
	r := make([]byte, 16, fileRefSize)
	r[0] = id
	r = binary.LittleEndian.AppendUint64(r, uint64(size))
	r = binary.LittleEndian.AppendUint32(r, crc)
	return binary.LittleEndian.AppendUint32(r, chunks)
}

func TestFileEntryDecodeDecisions(t *testing.T) {
	tests := map[string]struct {
		in   []byte
		want error
	}{
		"an empty body and a reference decode":           {sealedV2(uv(0), ref(1, 10, 2, 3)), nil},
		"an inline body in a version 2 value is corrupt": {sealedV2(uv(1), []byte("x"), ref(1, 10, 2, 3)), ErrCorrupt},
		"a reference cut short is corrupt":               {sealedV2(uv(0), ref(1, 10, 2, 3)[:fileRefSize-1]), ErrCorrupt},
		"bytes after the reference are corrupt":          {sealedV2(uv(0), ref(1, 10, 2, 3), []byte{0}), ErrCorrupt},
		"a missing reference is corrupt":                 {sealedV2(uv(0)), ErrCorrupt},
		"a negative size is corrupt":                     {sealedV2(uv(0), ref(1, -1, 2, 3)), ErrCorrupt},
		"a missing body length is corrupt":               {sealedV2(), ErrCorrupt},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			var got Entry
			err := Decode(tt.in, &got)
			if !errors.Is(err, tt.want) {
				t.Fatalf("Decode = %v, want %v", err, tt.want)
			}
			if err != nil && got.File != nil {
				t.Fatalf("a failed Decode left File %+v", got.File)
			}
			if err == nil && (got.File == nil || got.File.ID[0] != 1 || got.File.Size != 10 || got.File.CRC != 2 || got.File.Chunks != 3) {
				t.Fatalf("File = %+v", got.File)
			}
		})
	}
}

func TestDecodeReusesTheBodyFile(t *testing.T) {
	fileEnc := Encode(nil, fileCases()["a typical response with its body in a file"])
	inlineEnc := Encode(nil, sampleEntry())

	var e Entry
	if err := Decode(fileEnc, &e); err != nil {
		t.Fatal(err)
	}
	if allocs := testing.AllocsPerRun(100, func() {
		if err := Decode(fileEnc, &e); err != nil {
			t.Fatal(err)
		}
	}); allocs != 0 {
		t.Errorf("Decode of a file entry into an Entry with a BodyFile: %v allocs, want 0", allocs)
	}
	if err := Decode(inlineEnc, &e); err != nil {
		t.Fatal(err)
	}
	if e.File != nil {
		t.Fatalf("an inline entry decoded over a file entry kept File %+v", e.File)
	}
	if len(e.Body) != 1024 {
		t.Fatalf("Body is %d bytes, want 1024", len(e.Body))
	}
}

// BenchmarkDecodeReuseFile is BenchmarkDecodeReuse for an entry whose body
// is in the body store.
func BenchmarkDecodeReuseFile(b *testing.B) {
	enc := Encode(nil, fileCases()["a typical response with its body in a file"])
	var e Entry
	b.ReportAllocs()
	for b.Loop() {
		if err := Decode(enc, &e); err != nil {
			b.Fatal(err)
		}
	}
}
