package entry

import (
	"encoding/binary"
	"errors"
	"hash/crc32"
	"math"
	"math/bits"
	"time"
	"unsafe"
)

// Errors returned by Decode. Every one of them means "treat as a miss".
var (
	ErrCorrupt  = errors.New("entry: corrupt value")       // bad checksum, truncated, bad lengths
	ErrVersion  = errors.New("entry: unsupported version") // written by a newer or older codec
	ErrNotEntry = errors.New("entry: not an entry")        // magic bytes missing (foreign value)
)

// Binary layout, version 1. Integers are little endian; "uv" is an
// unsigned varint (encoding/binary); a string or byte string is a uv length
// followed by that many bytes; a list is a uv count followed by its items.
//
//	off  size  field
//	  0     3  magic "TCE"
//	  3     1  version (1)
//	  4     4  CRC-32C (Castagnoli) of every byte from offset 8 to the end
//	  8     1  Kind
//	  9     2  Flags
//	 11     2  Status (low 16 bits of Entry.Status)
//	 13     8  RequestTime   unix nanoseconds (math.MinInt64 = zero time)
//	 21     8  ResponseTime  unix nanoseconds (math.MinInt64 = zero time)
//	 29     8  InitialAge            int64 nanoseconds
//	 37     8  Lifetime              int64 nanoseconds
//	 45     8  StaleWhileRevalidate  int64 nanoseconds
//	 53     8  StaleIfError          int64 nanoseconds
//	 61     8  Nonce (KindVary), or StaleIfUnreachable int64 nanoseconds
//	           (KindResponse), or 0 (other kinds)
//	 69        Host     string
//	           Target   string
//	           Tags     list of string
//	           Vary     list of string
//	           Header   list of (Name string, Value string)
//	           Body     byte string
//
// The slot at offset 61 carries the one field of those two that the kind
// uses: a response has no nonce and a marker no stale windows. Writers
// from before StaleIfUnreachable existed left it 0 in responses, which
// reads as no such window, and ignore it in responses when they read, so
// both kinds of sidecar share entries unchanged.
//
// The value ends exactly after Body; trailing bytes are corruption. Any
// change to this layout bumps version: a reader never guesses at a layout
// it does not know (ErrVersion, i.e. a miss) and the writer of the newer
// version repopulates the cache.
//
// Version 2 is an entry whose body lives outside it (Entry.File set): the
// version 1 layout with version byte 2 and an empty Body, followed by the
// reference, covered by the same CRC:
//
//	16  File.ID
//	 8  File.Size    int64 (negative is corrupt)
//	 4  File.CRC
//	 4  File.Chunks
//
// An entry without File always encodes as version 1, byte for byte as
// before version 2 existed, so sidecars of both kinds share inline
// entries; a sidecar that knows only version 1 reads a version 2 value as
// ErrVersion, a miss, which is safe during a rolling upgrade.
//
// Version 3 is a partial response (Entry.Partial set, Kind KindPartial):
// the version 1 layout with version byte 3, whose Body is the held spans'
// bytes back to back, followed by, under the same CRC:
//
//	uv  Partial.Length (>= 1)
//	uv  number of spans (>= 1)
//	    each span: uv Start, uv End (inclusive; sorted, disjoint, not
//	    adjacent, End < Length), their lengths summing to len(Body)
//
// Entries without Partial encode exactly as before, and a sidecar that
// knows only versions 1 and 2 reads a version 3 value as ErrVersion (a
// miss). Version 3 values are only ever in a replica's own L1: partial
// responses are not written to L2.
//
// Version 4 is a partial response whose bytes are in body files
// (Entry.Partial with Pieces, Kind KindPartial): the version 1 layout
// with version byte 4 and an empty Body, followed by, under the same CRC:
//
//	uv  Partial.Length (>= 1)
//	uv  number of pieces (1..MaxPieces)
//	    each piece: uv Start, uv End (inclusive; sorted, disjoint,
//	    End < Length), uv Offset, then its file: 16 ID, 8 Size int64,
//	    4 CRC (Offset + End - Start + 1 <= Size)
//
// Entries without Pieces encode exactly as before; a sidecar that knows
// only versions 1 to 3 reads version 4 as ErrVersion, a miss. Version 4
// values are in a replica's own L1 and in the trailers of its piece files
// (package bodystore), never in L2.
// Versions 5 and 6 are a response stored under a tier that normalizes
// Accept-Encoding (Flags has FlagCoded): the version 1 layout (5, body
// inline) or the version 2 layout (6, body in a file), with version byte 5
// or 6, followed by, under the same CRC:
//
//	8  DecodedSize int64 (-1: unknown; otherwise >= 0)
//
// A response without FlagCoded encodes as version 1 or 2, byte for byte
// as before. A sidecar that knows only versions 1 to 4 reads versions 5
// and 6 as ErrVersion, a miss: it would serve the stored coding to every
// client, which only a sidecar that negotiates may do.
const (
	magic     = "TCE"
	version   = 1 // body inline
	versionV2 = 2 // body in a file (Entry.File)
	versionV3 = 3 // a partial response (Entry.Partial), body inline
	versionV4 = 4 // a partial response in body files (Entry.Partial.Pieces)
	versionV5 = 5 // version 1 with DecodedSize (FlagCoded)
	versionV6 = 6 // version 2 with DecodedSize (FlagCoded)

	codedSize = 8 // the DecodedSize of versions 5 and 6

	offVersion  = 3
	offCRC      = 4
	offKind     = 8
	offFlags    = 9
	offStatus   = 11
	offReqTime  = 13
	offRespTime = 21
	offInitAge  = 29
	offLifetime = 37
	offSWR      = 45
	offSIE      = 53
	offNonce    = 61
	fixedSize   = 69

	fileRefSize = 16 + 8 + 4 + 4
	// pieceFileSize is a piece's file reference: ID, Size, CRC (no
	// Chunks: pieces are never in L2).
	pieceFileSize = 16 + 8 + 4
)

// slot61 is what the slot at offset 61 carries for e (see the layout).
func slot61(e *Entry) uint64 {
	if e.Kind == KindResponse {
		return uint64(e.StaleIfUnreachable)
	}
	return e.Nonce
}

// castagnoli is built once. For this polynomial crc32 uses the CRC32
// instruction of SSE4.2 and ARMv8; its cost is part of BenchmarkDecodeReuse
// (go test -run '^$' -bench DecodeReuse ./internal/entry).
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// zeroTime encodes time.Time{}, whose UnixNano is undefined. Instants
// outside the int64 nanosecond range (years 1678..2262) are clamped to the
// nearest representable one, never onto zeroTime.
const zeroTime = math.MinInt64

var (
	minTime = time.Unix(0, math.MinInt64+1)
	maxTime = time.Unix(0, math.MaxInt64)
)

// EncodedSize returns len(Encode(nil, e)) without encoding, so callers can
// check a size limit first.
func EncodedSize(e *Entry) int {
	n := fixedSize
	n += strSize(e.Host) + strSize(e.Target)
	n += uvSize(uint64(len(e.Tags)))
	for _, s := range e.Tags {
		n += strSize(s)
	}
	n += uvSize(uint64(len(e.Vary)))
	for _, s := range e.Vary {
		n += strSize(s)
	}
	n += uvSize(uint64(len(e.Header)))
	for i := range e.Header {
		n += strSize(e.Header[i].Name) + strSize(e.Header[i].Value)
	}
	if pieced(e) {
		return n + uvSize(0) + piecesSize(e.Partial)
	}
	if e.Partial != nil {
		n += uvSize(uint64(len(e.Body))) + len(e.Body)
		return n + partialSize(e.Partial)
	}
	if coded(e) {
		n += codedSize
	}
	if e.File != nil {
		return n + uvSize(0) + fileRefSize
	}
	n += uvSize(uint64(len(e.Body))) + len(e.Body)
	return n
}

// partialSize is the length of the version 3 tail.
func partialSize(pa *Partial) int {
	n := uvSize(uint64(pa.Length)) + uvSize(uint64(len(pa.Spans)))
	for _, s := range pa.Spans {
		n += uvSize(uint64(s.Start)) + uvSize(uint64(s.End))
	}
	return n
}

// coded reports whether e encodes as version 5 or 6.
func coded(e *Entry) bool {
	return e.Kind == KindResponse && e.Partial == nil && e.Flags&FlagCoded != 0
}

// pieced reports whether e encodes as version 4.
func pieced(e *Entry) bool { return e.Partial != nil && len(e.Partial.Pieces) > 0 }

// piecesSize is the length of the version 4 tail.
func piecesSize(pa *Partial) int {
	n := uvSize(uint64(pa.Length)) + uvSize(uint64(len(pa.Pieces)))
	for i := range pa.Pieces {
		pc := &pa.Pieces[i]
		n += uvSize(uint64(pc.Start)) + uvSize(uint64(pc.End)) + uvSize(uint64(pc.Offset)) + pieceFileSize
	}
	return n
}

// Encode appends the binary form of e to dst and returns the extended
// slice. It does not allocate when dst has EncodedSize(e) bytes of spare
// capacity. Status is stored in 16 bits; times must be zero or within the
// years 1678..2262 (others are clamped). When e.File is set the value is
// version 2 and e.Body is not encoded (the body is in the file). When
// e.Partial is set the value is version 3, e.Body is encoded and e.File
// is not; with e.Partial.Pieces it is version 4 and neither is. The
// caller keeps e.Partial consistent with e.Body and e.Kind (Decode
// refuses a value where they disagree).
func Encode(dst []byte, e *Entry) []byte {
	size := EncodedSize(e)
	start := len(dst)
	if cap(dst)-start < size {
		grown := make([]byte, start, start+size)
		copy(grown, dst)
		dst = grown
	}
	b := dst[start : start+size : start+size]

	copy(b, magic)
	b[offVersion] = version
	switch {
	case pieced(e):
		b[offVersion] = versionV4
	case e.Partial != nil:
		b[offVersion] = versionV3
	case e.File != nil && coded(e):
		b[offVersion] = versionV6
	case e.File != nil:
		b[offVersion] = versionV2
	case coded(e):
		b[offVersion] = versionV5
	}
	b[offKind] = byte(e.Kind)
	binary.LittleEndian.PutUint16(b[offFlags:], uint16(e.Flags))
	binary.LittleEndian.PutUint16(b[offStatus:], uint16(e.Status))
	binary.LittleEndian.PutUint64(b[offReqTime:], uint64(timeToNanos(e.RequestTime)))
	binary.LittleEndian.PutUint64(b[offRespTime:], uint64(timeToNanos(e.ResponseTime)))
	binary.LittleEndian.PutUint64(b[offInitAge:], uint64(e.InitialAge))
	binary.LittleEndian.PutUint64(b[offLifetime:], uint64(e.Lifetime))
	binary.LittleEndian.PutUint64(b[offSWR:], uint64(e.StaleWhileRevalidate))
	binary.LittleEndian.PutUint64(b[offSIE:], uint64(e.StaleIfError))
	binary.LittleEndian.PutUint64(b[offNonce:], slot61(e))

	p := b[:fixedSize]
	p = appendStr(p, e.Host)
	p = appendStr(p, e.Target)
	p = binary.AppendUvarint(p, uint64(len(e.Tags)))
	for _, s := range e.Tags {
		p = appendStr(p, s)
	}
	p = binary.AppendUvarint(p, uint64(len(e.Vary)))
	for _, s := range e.Vary {
		p = appendStr(p, s)
	}
	p = binary.AppendUvarint(p, uint64(len(e.Header)))
	for i := range e.Header {
		p = appendStr(p, e.Header[i].Name)
		p = appendStr(p, e.Header[i].Value)
	}
	if pa := e.Partial; pieced(e) {
		p = binary.AppendUvarint(p, 0)
		p = binary.AppendUvarint(p, uint64(pa.Length))
		p = binary.AppendUvarint(p, uint64(len(pa.Pieces)))
		for i := range pa.Pieces {
			pc := &pa.Pieces[i]
			p = binary.AppendUvarint(p, uint64(pc.Start))
			p = binary.AppendUvarint(p, uint64(pc.End))
			p = binary.AppendUvarint(p, uint64(pc.Offset))
			p = append(p, pc.File.ID[:]...)
			p = binary.LittleEndian.AppendUint64(p, uint64(pc.File.Size))
			p = binary.LittleEndian.AppendUint32(p, pc.File.CRC)
		}
	} else if pa != nil {
		p = binary.AppendUvarint(p, uint64(len(e.Body)))
		p = append(p, e.Body...)
		p = binary.AppendUvarint(p, uint64(pa.Length))
		p = binary.AppendUvarint(p, uint64(len(pa.Spans)))
		for _, sp := range pa.Spans {
			p = binary.AppendUvarint(p, uint64(sp.Start))
			p = binary.AppendUvarint(p, uint64(sp.End))
		}
	} else if f := e.File; f != nil {
		p = binary.AppendUvarint(p, 0)
		p = append(p, f.ID[:]...)
		p = binary.LittleEndian.AppendUint64(p, uint64(f.Size))
		p = binary.LittleEndian.AppendUint32(p, f.CRC)
		p = binary.LittleEndian.AppendUint32(p, f.Chunks)
	} else {
		p = binary.AppendUvarint(p, uint64(len(e.Body)))
		p = append(p, e.Body...)
	}
	if coded(e) {
		p = binary.LittleEndian.AppendUint64(p, uint64(e.DecodedSize))
	}
	// b's capacity is exactly EncodedSize, so the appends above wrote into
	// it in place; were the two ever to disagree, append would have moved p
	// and the round-trip tests would fail.
	_ = p

	binary.LittleEndian.PutUint32(b[offCRC:], crc32.Checksum(b[offKind:], castagnoli))
	return dst[:start+size]
}

// Decode parses b into e. Strings, header fields and Body alias b: the
// caller must not modify b afterwards. The Header, Tags and Vary slices of
// e are reused when they have the capacity, so a caller may decode into
// the same Entry repeatedly; everything else in e is overwritten. On error
// e is reset to its zero value (keeping that capacity).
//
// Every version decodes: a version 2 value sets e.File (and leaves Body
// nil), written into the BodyFile e.File already points to when it is
// set, so decoding into a reused Entry does not allocate; a version 3
// value sets e.Partial likewise, as does a version 4 value (with Pieces);
// a version 1 value sets both to nil.
//
// Decode never panics, checks every length against the bytes actually
// present before using or allocating for it, and allocates at most the
// three slices above, the BodyFile, and the Partial with its spans.
func Decode(b []byte, e *Entry) error {
	if err := decode(b, e); err != nil {
		*e = Entry{Header: e.Header[:0], Tags: e.Tags[:0], Vary: e.Vary[:0]}
		return err
	}
	return nil
}

func decode(b []byte, e *Entry) error {
	if len(b) < len(magic) || string(b[:len(magic)]) != magic {
		return ErrNotEntry
	}
	if len(b) <= offVersion {
		return ErrCorrupt
	}
	v := b[offVersion]
	if v < version || v > versionV6 { // versions 1 to 6, in order
		return ErrVersion
	}
	if len(b) < fixedSize {
		return ErrCorrupt
	}
	if binary.LittleEndian.Uint32(b[offCRC:]) != crc32.Checksum(b[offKind:], castagnoli) {
		return ErrCorrupt
	}
	e.DecodedSize = 0
	if v == versionV5 || v == versionV6 {
		// Version 1 or 2 with the decoded size at the end (the CRC, checked
		// above, covers it).
		if len(b) < fixedSize+codedSize {
			return ErrCorrupt
		}
		size := int64(binary.LittleEndian.Uint64(b[len(b)-codedSize:]))
		if size < -1 || b[offKind] != byte(KindResponse) ||
			Flag(binary.LittleEndian.Uint16(b[offFlags:]))&FlagCoded == 0 {
			return ErrCorrupt
		}
		e.DecodedSize = size
		b = b[: len(b)-codedSize : len(b)-codedSize]
		v -= versionV5 - version // 5 reads as 1, 6 as 2
	} else if b[offKind] == byte(KindResponse) && Flag(binary.LittleEndian.Uint16(b[offFlags:]))&FlagCoded != 0 {
		return ErrCorrupt // a coded response is version 5 or 6
	}

	e.Kind = Kind(b[offKind])
	if (e.Kind == KindPartial) != (v == versionV3 || v == versionV4) {
		// A partial response is version 3 or 4, and those only hold
		// them: no path may take one for the other.
		return ErrCorrupt
	}
	e.Flags = Flag(binary.LittleEndian.Uint16(b[offFlags:]))
	e.Status = int(binary.LittleEndian.Uint16(b[offStatus:]))
	e.RequestTime = nanosToTime(int64(binary.LittleEndian.Uint64(b[offReqTime:])))
	e.ResponseTime = nanosToTime(int64(binary.LittleEndian.Uint64(b[offRespTime:])))
	e.InitialAge = time.Duration(binary.LittleEndian.Uint64(b[offInitAge:]))
	e.Lifetime = time.Duration(binary.LittleEndian.Uint64(b[offLifetime:]))
	e.StaleWhileRevalidate = time.Duration(binary.LittleEndian.Uint64(b[offSWR:]))
	e.StaleIfError = time.Duration(binary.LittleEndian.Uint64(b[offSIE:]))
	e.Nonce, e.StaleIfUnreachable = 0, 0
	if slot := binary.LittleEndian.Uint64(b[offNonce:]); e.Kind == KindResponse {
		e.StaleIfUnreachable = time.Duration(slot)
	} else {
		e.Nonce = slot
	}

	// The variable part is read with offsets threaded through small
	// helpers. A failed read returns the offset bad(b), which is past the
	// end: every later read fails too, so one check at the end suffices.
	off := uint(fixedSize)
	e.Host, off = readStr(b, off)
	e.Target, off = readStr(b, off)
	e.Tags, off = readStrs(b, off, e.Tags)
	e.Vary, off = readStrs(b, off, e.Vary)

	// Every field takes at least two bytes (two empty strings), so a count
	// larger than half of what is left is a lie; refusing it before make
	// bounds the allocation by the input actually present.
	var n uint64
	n, off = readUv(b, off)
	if off > uint(len(b)) || n > uint64(uint(len(b))-off)/2 {
		return ErrCorrupt
	}
	if uint64(cap(e.Header)) >= n {
		e.Header = e.Header[:n]
	} else {
		e.Header = make([]Field, n)
	}
	for i := range e.Header {
		f := &e.Header[i]
		f.Name, off = readStr(b, off)
		f.Value, off = readStr(b, off)
	}

	var bodyLen uint64
	bodyLen, off = readUv(b, off)
	switch v {
	case versionV2:
		return decodeFileRef(b, off, bodyLen, e)
	case versionV3:
		return decodePartial(b, off, bodyLen, e)
	case versionV4:
		return decodePieces(b, off, bodyLen, e)
	}
	if off > uint(len(b)) || bodyLen != uint64(uint(len(b))-off) {
		// Too short, or trailing bytes after the body.
		return ErrCorrupt
	}
	e.Body = nil
	e.File = nil
	e.Partial = nil
	if bodyLen > 0 {
		e.Body = b[off:len(b):len(b)]
	}
	return nil
}

// decodeFileRef reads the version 2 tail: an empty body, then exactly the
// reference.
func decodeFileRef(b []byte, off uint, bodyLen uint64, e *Entry) error {
	if off > uint(len(b)) || bodyLen != 0 || uint(len(b))-off != fileRefSize {
		return ErrCorrupt
	}
	r := b[off:]
	size := int64(binary.LittleEndian.Uint64(r[16:]))
	if size < 0 {
		return ErrCorrupt
	}
	if e.File == nil {
		e.File = new(BodyFile)
	}
	f := e.File
	copy(f.ID[:], r[:16])
	f.Size = size
	f.CRC = binary.LittleEndian.Uint32(r[24:])
	f.Chunks = binary.LittleEndian.Uint32(r[28:])
	e.Body = nil
	e.Partial = nil
	return nil
}

// decodePartial reads the version 3 tail: the body of bodyLen bytes, then
// the complete length and the spans, which must describe that body
// exactly (a reader slices Body by them). The Partial and its spans are
// written into those e already has, when it has them.
func decodePartial(b []byte, off uint, bodyLen uint64, e *Entry) error {
	if off > uint(len(b)) || bodyLen > uint64(uint(len(b))-off) {
		return ErrCorrupt
	}
	body := b[off : off+uint(bodyLen) : off+uint(bodyLen)]
	off += uint(bodyLen)
	length, off := readUv(b, off)
	n, off := readUv(b, off)
	// Each span takes at least two bytes.
	if off > uint(len(b)) || length == 0 || length > math.MaxInt64 || n == 0 || n > uint64(uint(len(b))-off)/2 {
		return ErrCorrupt
	}
	pa := e.Partial
	if pa == nil {
		pa = new(Partial)
	}
	if uint64(cap(pa.Spans)) >= n {
		pa.Spans = pa.Spans[:n]
	} else {
		pa.Spans = make([]Span, n)
	}
	var held uint64
	next := uint64(0) // the least Start the next span may have
	for i := range pa.Spans {
		var start, end uint64
		start, off = readUv(b, off)
		end, off = readUv(b, off)
		if off > uint(len(b)) || start < next || end < start || end >= length {
			return ErrCorrupt
		}
		pa.Spans[i] = Span{Start: int64(start), End: int64(end)}
		held += end - start + 1
		next = end + 2 // neither overlapping nor adjacent
	}
	if off != uint(len(b)) || held != bodyLen {
		return ErrCorrupt
	}
	pa.Length = int64(length)
	pa.Pieces = pa.Pieces[:0]
	e.Partial = pa
	e.File = nil
	e.Body = nil
	if bodyLen > 0 {
		e.Body = body
	}
	return nil
}

// decodePieces reads the version 4 tail: an empty body, the complete
// length and the pieces, each within the length and within its file. The
// Partial and its pieces are written into those e already has, when it
// has them.
func decodePieces(b []byte, off uint, bodyLen uint64, e *Entry) error {
	if bodyLen != 0 {
		return ErrCorrupt
	}
	length, off := readUv(b, off)
	n, off := readUv(b, off)
	if off > uint(len(b)) || length == 0 || length > math.MaxInt64 || n == 0 || n > MaxPieces {
		return ErrCorrupt
	}
	pa := e.Partial
	if pa == nil {
		pa = new(Partial)
	}
	if uint64(cap(pa.Pieces)) >= n {
		pa.Pieces = pa.Pieces[:n]
	} else {
		pa.Pieces = make([]Piece, n)
	}
	next := uint64(0) // the least Start the next piece may have
	for i := range pa.Pieces {
		var start, end, at uint64
		start, off = readUv(b, off)
		end, off = readUv(b, off)
		at, off = readUv(b, off)
		if off > uint(len(b)) || uint(len(b))-off < pieceFileSize || start < next || end < start || end >= length {
			return ErrCorrupt
		}
		r := b[off : off+pieceFileSize]
		off += pieceFileSize
		size := binary.LittleEndian.Uint64(r[16:])
		// The span's bytes lie within the file's body.
		if size > math.MaxInt64 || at > size || end-start+1 > size-at {
			return ErrCorrupt
		}
		pc := &pa.Pieces[i]
		pc.Span = Span{Start: int64(start), End: int64(end)}
		pc.Offset = int64(at)
		copy(pc.File.ID[:], r[:16])
		pc.File.Size = int64(size)
		pc.File.CRC = binary.LittleEndian.Uint32(r[24:])
		pc.File.Chunks = 0
		next = end + 1 // disjoint; adjacent pieces are apart
	}
	if off != uint(len(b)) {
		return ErrCorrupt
	}
	pa.Length = int64(length)
	pa.Spans = pa.Spans[:0]
	e.Partial = pa
	e.File = nil
	e.Body = nil
	return nil
}

// bad is the offset a failed read returns: past the end of b, so that
// every later read fails as well.
func bad(b []byte) uint { return uint(len(b)) + 1 }

// readUv reads an unsigned varint at off.
func readUv(b []byte, off uint) (uint64, uint) {
	if off < uint(len(b)) && b[off] < 0x80 {
		return uint64(b[off]), off + 1
	}
	return readUvSlow(b, off)
}

func readUvSlow(b []byte, off uint) (uint64, uint) {
	if off >= uint(len(b)) {
		return 0, bad(b)
	}
	v, n := binary.Uvarint(b[off:])
	if n <= 0 {
		return 0, bad(b)
	}
	return v, off + uint(n)
}

// readStr reads a length-prefixed string at off. The result aliases b.
func readStr(b []byte, off uint) (string, uint) {
	// Fast path: a one-byte length (strings under 128 bytes, which is
	// nearly every header field), entirely present.
	if off < uint(len(b)) {
		if n := uint(b[off]); n < 0x80 && n < uint(len(b))-off {
			off++
			if n == 0 {
				return "", off
			}
			return unsafe.String(&b[off], n), off + n
		}
	}
	return readStrSlow(b, off)
}

func readStrSlow(b []byte, off uint) (string, uint) {
	n, off := readUv(b, off)
	if off > uint(len(b)) || n > uint64(uint(len(b))-off) {
		return "", bad(b)
	}
	if n == 0 {
		return "", off
	}
	return unsafe.String(&b[off], int(n)), off + uint(n)
}

// readStrs reads a list of strings at off into reuse's backing array when
// it has the capacity. Each string takes at least one byte, which bounds
// the count before anything is allocated.
func readStrs(b []byte, off uint, reuse []string) ([]string, uint) {
	n, off := readUv(b, off)
	if off > uint(len(b)) || n > uint64(uint(len(b))-off) {
		return reuse[:0], bad(b)
	}
	var out []string
	if uint64(cap(reuse)) >= n {
		out = reuse[:n]
	} else {
		out = make([]string, n)
	}
	for i := range out {
		out[i], off = readStr(b, off)
	}
	return out, off
}

func appendStr(p []byte, s string) []byte {
	p = binary.AppendUvarint(p, uint64(len(s)))
	return append(p, s...)
}

func strSize(s string) int { return uvSize(uint64(len(s))) + len(s) }

// uvSize is the length of the uvarint encoding of v.
func uvSize(v uint64) int { return (bits.Len64(v|1) + 6) / 7 }

func timeToNanos(t time.Time) int64 {
	switch {
	case t.IsZero():
		return zeroTime
	case t.Before(minTime):
		return math.MinInt64 + 1
	case t.After(maxTime):
		return math.MaxInt64
	}
	return t.UnixNano()
}

func nanosToTime(n int64) time.Time {
	if n == zeroTime {
		return time.Time{}
	}
	return time.Unix(0, n).UTC()
}
