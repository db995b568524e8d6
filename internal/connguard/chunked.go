package connguard

// Chunked request bodies, as net/http's chunkedReader and body.readTrailer
// read them.

// chunkState is reset for every chunk-size line (excess: every body).
type chunkState struct {
	size   uint64
	digits int
	lineN  int
	phase  uint8 // chunkDigits, chunkWS, chunkExt
	excess int64
}

const (
	chunkDigits uint8 = iota
	chunkWS
	chunkExt
)

// chunkLineByte follows net/http's chunk-size line: 1..16 hex digits,
// then either trailing SP/HTAB only, or ';' and an extension it ignores;
// CRLF strictly (no bare LF, no CR elsewhere).
func (t *tracker) chunkLineByte(b byte) {
	c := &t.chunk
	if b == '\r' {
		if c.digits == 0 {
			t.die()
			return
		}
		t.crFrom, t.st = stChunkLine, stCR
		return
	}
	c.lineN++
	if c.lineN > maxChunkLine {
		t.die()
		return
	}
	switch c.phase {
	case chunkDigits:
		if v, ok := hexVal(b); ok {
			if c.digits == 16 {
				t.die()
				return
			}
			c.size = c.size<<4 | uint64(v)
			c.digits++
			return
		}
		switch {
		case c.digits == 0:
			t.die()
		case b == ';':
			c.phase = chunkExt
		case b == ' ' || b == '\t':
			c.phase = chunkWS
		default:
			t.die()
		}
	case chunkWS:
		// net/http trims trailing whitespace before cutting the extension,
		// so "5 ;x" is an error.
		if b != ' ' && b != '\t' {
			t.die()
		}
	case chunkExt:
		if b == '\n' {
			t.die()
		}
	}
}

func (t *tracker) endChunkLine() {
	c := &t.chunk
	// Same arithmetic, including wrap-around, as net/http's chunkedReader.
	c.excess += int64(c.lineN) + 2
	c.excess -= 16 + (2 * int64(c.size))
	c.excess = max(c.excess, 0)
	if c.excess > maxChunkExcess {
		t.die()
		return
	}
	if c.size == 0 {
		t.st = stTrailerStart
		t.limit, t.count = maxTrailer, 0
		return
	}
	t.remain = c.size
	t.st = stChunkData
}

func (t *tracker) endBody() {
	t.limit, t.count = noLimit, 0
	t.st = stLineStart
}

// trailerByte reads the trailer section after the last chunk. net/http
// takes CRLF right there as "no trailers"; otherwise it wants the closing
// CRLF CRLF within its 4 KiB buffer (maxTrailer) and parses the section
// as a MIME header. When that fails it reports a body error and may read
// the unread trailer bytes as the next request, so the tracker accepts
// only trailers net/http surely reads the same way: token names, valid
// values, CRLF line ends, no obs-fold; anything else ends tracking.
func (t *tracker) trailerByte(b byte) {
	switch t.st {
	case stTrailerStart, stTrailerLineStart:
		switch {
		case b == '\r':
			t.crFrom, t.st = t.st, stCR
		case tokenByte(b):
			t.st = stTrailerName
		default:
			t.die()
		}
	case stTrailerName:
		switch {
		case b == ':':
			t.st = stTrailerValue
		case !tokenByte(b):
			t.die()
		}
	case stTrailerValue:
		switch {
		case b == '\r':
			t.crFrom, t.st = stTrailerValue, stCR
		case !fieldValueByte(b):
			t.die()
		}
	}
}

func hexVal(b byte) (byte, bool) {
	switch {
	case '0' <= b && b <= '9':
		return b - '0', true
	case 'a' <= b && b <= 'f':
		return b - 'a' + 10, true
	case 'A' <= b && b <= 'F':
		return b - 'A' + 10, true
	}
	return 0, false
}
