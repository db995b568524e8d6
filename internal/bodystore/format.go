package bodystore

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash/crc32"
	"strings"

	"github.com/tiercache/tiercache/internal/entry"
)

// File layout (see the package comment).
const (
	headerMagic  = "TCB\x01"
	trailerMagic = "TCBE"

	headerSize = 64 // also the body offset
	offHdrID   = 4
	offHdrKey  = 20
	offHdrBody = 52

	// tailSize is the fixed end of the trailer: trailer length u32, body
	// size u64, body CRC u32, magic.
	tailSize = 4 + 8 + 4 + 4

	// maxTrailer bounds what the restart scan reads for one trailer: a
	// key and an entry without its body are far smaller.
	maxTrailer = 16 << 20

	bodySuffix = ".body"
	tmpSuffix  = ".tmp"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// parseName returns the id of a file named <32 hex digits><suffix>.
func parseName(name, suffix string) ([16]byte, bool) {
	var id [16]byte
	hexID, ok := strings.CutSuffix(name, suffix)
	if !ok || len(hexID) != 32 {
		return id, false
	}
	if _, err := hex.Decode(id[:], []byte(hexID)); err != nil {
		return id, false
	}
	return id, true
}

func keyHash(key string) [32]byte { return sha256.Sum256([]byte(key)) }

func makeHeader(id [16]byte, key string) [headerSize]byte {
	var h [headerSize]byte
	copy(h[:], headerMagic)
	copy(h[offHdrID:], id[:])
	kh := keyHash(key)
	copy(h[offHdrKey:], kh[:])
	binary.LittleEndian.PutUint32(h[offHdrBody:], headerSize)
	return h
}

// checkHeader verifies the parts of a header that make a file ours and
// this id's. The key is checked separately: a wrong key is not damage.
func checkHeader(h []byte, id [16]byte) error {
	switch {
	case len(h) < headerSize:
		return fmt.Errorf("%w: header of %d bytes", ErrMismatch, len(h))
	case string(h[:len(headerMagic)]) != headerMagic:
		return fmt.Errorf("%w: not a body file (magic %q)", ErrMismatch, h[:len(headerMagic)])
	case !bytes.Equal(h[offHdrID:offHdrID+16], id[:]):
		return fmt.Errorf("%w: header names id %x", ErrMismatch, h[offHdrID:offHdrID+16])
	case binary.LittleEndian.Uint32(h[offHdrBody:]) != headerSize:
		return fmt.Errorf("%w: body offset %d", ErrMismatch, binary.LittleEndian.Uint32(h[offHdrBody:]))
	}
	return nil
}

func headerKeyMatches(h []byte, key string) bool {
	kh := keyHash(key)
	return bytes.Equal(h[offHdrKey:offHdrKey+32], kh[:])
}

// appendTrailer appends the trailer for a body of size bytes with the
// given CRC.
func appendTrailer(dst []byte, key string, enc []byte, size int64, crc uint32) []byte {
	n := 4 + len(key) + len(enc) + tailSize
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(key)))
	dst = append(dst, key...)
	dst = append(dst, enc...)
	dst = binary.LittleEndian.AppendUint32(dst, uint32(n))
	dst = binary.LittleEndian.AppendUint64(dst, uint64(size))
	dst = binary.LittleEndian.AppendUint32(dst, crc)
	return append(dst, trailerMagic...)
}

// tail is the fixed end of a trailer.
type tail struct {
	trailerLen int64
	size       int64
	crc        uint32
}

// parseTail checks the fixed end of a trailer against the file's size.
func parseTail(t []byte, fileSize int64) (tail, error) {
	if len(t) != tailSize || string(t[tailSize-4:]) != trailerMagic {
		return tail{}, fmt.Errorf("%w: no trailer (the body was never committed or was cut)", ErrMismatch)
	}
	tl := tail{
		trailerLen: int64(binary.LittleEndian.Uint32(t)),
		size:       int64(binary.LittleEndian.Uint64(t[4:])),
		crc:        binary.LittleEndian.Uint32(t[12:]),
	}
	if tl.trailerLen < tailSize+4 || tl.size < 0 || tl.size > fileSize ||
		headerSize+tl.size+tl.trailerLen != fileSize {
		return tail{}, fmt.Errorf("%w: trailer says body %d bytes and trailer %d bytes, file has %d",
			ErrMismatch, tl.size, tl.trailerLen, fileSize)
	}
	return tl, nil
}

// parseTrailer splits the variable part of a trailer (without the fixed
// tail) into key and entry, checks that the entry is this body's
// (checkEntry), and returns the entry's identity.
func parseTrailer(v []byte, id [16]byte, tl tail) (key string, enc []byte, who ident, err error) {
	if len(v) < 4 {
		return "", nil, ident{}, fmt.Errorf("%w: trailer of %d bytes", ErrMismatch, len(v))
	}
	kl := binary.LittleEndian.Uint32(v)
	if uint64(kl) > uint64(len(v)-4) {
		return "", nil, ident{}, fmt.Errorf("%w: key length %d in a trailer of %d bytes", ErrMismatch, kl, len(v))
	}
	key = string(v[4 : 4+kl])
	enc = v[4+kl:]
	who, err = checkEntry(enc, id, tl.size, tl.crc)
	if err != nil {
		return "", nil, ident{}, err
	}
	return key, enc, who, nil
}

// checkEntry verifies that enc is the entry of this very body: a version
// 2 entry referring to it, or the version 4 entry of a piece file (a
// partial response with one piece, the whole of this body), and returns
// the entry's identity (copied out of enc; ident.piece for a piece file).
func checkEntry(enc []byte, id [16]byte, size int64, crc uint32) (ident, error) {
	var e entry.Entry
	if err := entry.Decode(enc, &e); err != nil {
		return ident{}, fmt.Errorf("%w: entry: %w", ErrMismatch, err)
	}
	ref := e.File
	if e.Partial != nil {
		pcs := e.Partial.Pieces
		if len(pcs) != 1 {
			return ident{}, fmt.Errorf("%w: a piece file's entry has %d pieces, not 1 in this file", ErrMismatch, len(pcs))
		}
		if pcs[0].Offset != 0 || pcs[0].Len() != pcs[0].File.Size {
			return ident{}, fmt.Errorf("%w: a piece file's entry holds %d bytes from %d of its %d", ErrMismatch,
				pcs[0].Len(), pcs[0].Offset, pcs[0].File.Size)
		}
		ref = &pcs[0].File
	}
	switch f := ref; {
	case f == nil:
		return ident{}, fmt.Errorf("%w: entry has its body inline, not in this file", ErrMismatch)
	case f.ID != id:
		return ident{}, fmt.Errorf("%w: entry refers to body %x", ErrMismatch, f.ID)
	case f.Size != size || f.CRC != crc:
		return ident{}, fmt.Errorf("%w: entry says %d bytes with CRC %08x, body has %d with %08x",
			ErrMismatch, f.Size, f.CRC, size, crc)
	}
	return identOf(&e), nil
}
