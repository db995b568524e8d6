package entry

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"testing"
)

// codedCases are responses stored under a tier that normalizes
// Accept-Encoding (versions 5 and 6).
func codedCases() map[string]struct {
	e       *Entry
	version byte
} {
	gz := sampleEntry()
	gz.Flags |= FlagCoded
	gz.Header = append(gz.Header, Field{"Content-Encoding", "gzip"})
	gz.DecodedSize = 1 << 20
	compressed := sampleEntry()
	compressed.Flags |= FlagCoded | FlagCompressed
	compressed.DecodedSize = 4096
	undecodable := sampleEntry()
	undecodable.Flags |= FlagCoded | FlagUndecodable
	undecodable.DecodedSize = -1
	filed := sampleEntry()
	filed.Flags |= FlagCoded
	filed.Body = nil
	filed.File = &BodyFile{ID: fileID(4), Size: 1 << 30, CRC: 9, Chunks: 3}
	filed.DecodedSize = 5 << 30
	empty := &Entry{Kind: KindResponse, Flags: FlagCoded, Status: 204}
	type tc = struct {
		e       *Entry
		version byte
	}
	return map[string]tc{
		"a gzip response as the origin sent it":       {gz, 5},
		"an identity response the cache compressed":   {compressed, 5},
		"a response that did not decode":              {undecodable, 5},
		"a coded response in a body file":             {filed, 6},
		"a coded response with no body and no header": {empty, 5},
	}
}

func TestCodedEntriesRoundTrip(t *testing.T) {
	for name, tc := range codedCases() {
		t.Run(name, func(t *testing.T) {
			got := roundTrip(t, tc.e, tc.version)
			if (got.File != nil) != (tc.e.File != nil) {
				t.Fatalf("File %+v, want %+v", got.File, tc.e.File)
			}
		})
	}
}

// An entry without FlagCoded still encodes as version 1 or 2, byte for
// byte as before, so that older sidecars keep reading it; and a value
// written before versions 5 and 6 existed decodes with DecodedSize 0 into
// an entry that held a coded one.
func TestUncodedEntriesKeepTheirVersion(t *testing.T) {
	e := sampleEntry()
	b := Encode(nil, e)
	if b[offVersion] != version {
		t.Fatalf("version %d", b[offVersion])
	}
	var got Entry
	coded := codedCases()["a gzip response as the origin sent it"].e
	if err := Decode(Encode(nil, coded), &got); err != nil {
		t.Fatal(err)
	}
	if err := Decode(b, &got); err != nil {
		t.Fatal(err)
	}
	if got.DecodedSize != 0 || got.Has(FlagCoded) {
		t.Fatalf("an old value decoded with DecodedSize %d, flags %x", got.DecodedSize, got.Flags)
	}
}

func TestCodedValuesRefused(t *testing.T) {
	valid := Encode(nil, codedCases()["a gzip response as the origin sent it"].e)
	reseal := func(b []byte) []byte {
		binary.LittleEndian.PutUint32(b[offCRC:], crc32.Checksum(b[offKind:], castagnoli))
		return b
	}
	withSize := func(n int64) []byte {
		b := bytes.Clone(valid)
		binary.LittleEndian.PutUint64(b[len(b)-8:], uint64(n))
		return reseal(b)
	}
	withoutFlag := func() []byte {
		b := bytes.Clone(valid)
		binary.LittleEndian.PutUint16(b[offFlags:], uint16(FlagNoCache))
		return reseal(b)
	}
	asV1 := func() []byte {
		b := bytes.Clone(valid)
		b[offVersion] = version
		return reseal(b[:len(b)-8])
	}
	tests := map[string][]byte{
		"a decoded size below -1 is corrupt":             withSize(-2),
		"version 5 without FlagCoded is corrupt":         withoutFlag(),
		"a coded response labelled version 1 is corrupt": asV1(),
		"a truncated decoded size is corrupt":            reseal(bytes.Clone(valid[:len(valid)-3])),
		"version 5 cut to its fixed fields is corrupt":   reseal(bytes.Clone(valid[:fixedSize+4])),
	}
	for name, b := range tests {
		t.Run(name, func(t *testing.T) {
			var got Entry
			if err := Decode(b, &got); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("Decode = %v, want ErrCorrupt", err)
			}
		})
	}
	var got Entry
	if err := Decode(withSize(-1), &got); err != nil || got.DecodedSize != -1 {
		t.Fatalf("DecodedSize -1: %v, %d", err, got.DecodedSize)
	}
}
