package connguard

// Request line and header block, as net/http reads them: bare LF ends a
// line like CRLF does, CR is allowed only right before LF, and only
// Content-Length and Transfer-Encoding affect framing.

func (t *tracker) reqLineByte(b byte) {
	r := &t.req
	switch b {
	case '\n':
		t.endRequestLine()
		return
	case '\r':
		t.crFrom, t.st = stReqLine, stCR
		return
	}
	r.line = (r.line ^ uint64(b)) * fnvPrime
	switch r.field {
	case 0:
		switch {
		case b == ' ' && r.methodN > 0:
			r.field = 1
		case tokenByte(b):
			if r.methodN < len(r.method) {
				r.method[r.methodN] = b
			}
			r.methodN++
		default:
			t.die() // net/http: invalid method
		}
	case 1:
		if b == ' ' {
			r.field = 2
			return
		}
		if r.uriN == 0 {
			r.uri0 = b
		}
		r.uriN++
	default:
		if r.protoN < len(r.proto) {
			r.proto[r.protoN] = b
		}
		r.protoN++
	}
}

func (t *tracker) endRequestLine() {
	r := &t.req
	if r.field != 2 || r.protoN != len(r.proto) {
		t.die() // net/http: malformed request line or version
		return
	}
	switch p := string(r.proto[:]); {
	case p == "HTTP/1.0":
		r.http10 = true
	case p[:7] == "HTTP/1." && '0' <= p[7] && p[7] <= '9':
	case p == "HTTP/2.0" && r.methodIs("PRI") && r.uriN == 1 && r.uri0 == '*':
		r.pri = true
	default:
		t.die() // net/http: 400 or 505
		return
	}
	t.st = stFieldStart
}

func (r *reqState) methodIs(m string) bool {
	return r.methodN == len(m) && string(r.method[:r.methodN]) == m
}

func (t *tracker) fieldStart(b byte) {
	r := &t.req
	switch b {
	case '\n':
		t.endHeader()
	case '\r':
		t.crFrom, t.st = stFieldStart, stCR
	case ' ', '\t':
		// obs-fold. net/http refuses it on the first line and folds it
		// into the previous value otherwise. A folded Content-Length or
		// Transfer-Encoding is not worth following.
		if r.fields == 0 || r.lastKind != fieldOther {
			t.die()
			return
		}
		t.st = stFieldSkip
	default:
		r.fields++
		r.nameN = 0
		r.nameMatch = 1<<fieldCL | 1<<fieldTE
		r.lastKind = fieldOther
		t.st = stFieldName
		t.nameByte(b)
	}
}

const (
	nameCL = "content-length"
	nameTE = "transfer-encoding"
)

// nameByte matches field names case-insensitively, as net/http's
// canonicalization does. As soon as the name cannot be Content-Length or
// Transfer-Encoding the rest of the line is skipped: it cannot change
// the framing, and if it is malformed (no colon, whitespace before the
// colon) net/http refuses the request and closes the connection.
func (t *tracker) nameByte(b byte) {
	r := &t.req
	if b == ':' {
		switch {
		case r.nameN == len(nameCL) && r.nameMatch&(1<<fieldCL) != 0:
			r.lastKind = fieldCL
			t.st = stCLValue
		case r.nameN == len(nameTE) && r.nameMatch&(1<<fieldTE) != 0:
			r.lastKind = fieldTE
			t.st = stTEValue
		default:
			t.st = stFieldSkip
			return
		}
		r.val, r.valPos, r.valOver = 0, 0, false
		return
	}
	c := lower(b)
	if r.nameN >= len(nameCL) || nameCL[r.nameN] != c {
		r.nameMatch &^= 1 << fieldCL
	}
	if r.nameN >= len(nameTE) || nameTE[r.nameN] != c {
		r.nameMatch &^= 1 << fieldTE
	}
	r.nameN++
	if r.nameMatch == 0 {
		if b == '\n' {
			t.st = stFieldStart // a line without a colon; net/http refuses it
			return
		}
		t.st = stFieldSkip
	}
}

// Content-Length value positions: leading whitespace, digits, trailing
// whitespace, anything else. net/http trims SP and HTAB and then wants
// 1..19 decimal digits that fit in 63 bits.
const (
	clLeading int8 = iota
	clDigits
	clTrailing
	clBad
)

func (t *tracker) clByte(b byte) {
	r := &t.req
	switch {
	case b == '\n':
		t.endCL()
	case b == '\r':
		t.crFrom, t.st = stCLValue, stCR
	case b == ' ' || b == '\t':
		if r.valPos == clDigits {
			r.valPos = clTrailing
		}
	case '0' <= b && b <= '9' && r.valPos <= clDigits:
		r.valPos = clDigits
		d := uint64(b - '0')
		if r.val > (1<<63-1-d)/10 {
			r.valOver = true
		}
		r.val = r.val*10 + d
	default:
		r.valPos = clBad
	}
}

func (t *tracker) endCL() {
	r := &t.req
	switch {
	case r.valPos != clDigits && r.valPos != clTrailing || r.valOver:
		r.clInvalid = true
	case r.clCount > 0 && r.val != r.cl:
		r.clConflict = true
	default:
		r.cl = r.val
	}
	r.clCount++
	t.st = stFieldStart
}

// Transfer-Encoding value positions: 0..7 is how much of "chunked" has
// matched (after leading whitespace), then trailing whitespace, or bad.
// net/http accepts exactly one field whose trimmed value equals "chunked"
// ignoring ASCII case.
const (
	teChunked  = "chunked"
	teTrailing = int8(len(teChunked) + 1)
	teMismatch = int8(-1)
)

func (t *tracker) teByte(b byte) {
	r := &t.req
	switch {
	case b == '\n':
		t.endTE()
	case b == '\r':
		t.crFrom, t.st = stTEValue, stCR
	case r.valPos == teMismatch:
	case b == ' ' || b == '\t':
		switch r.valPos {
		case 0:
		case int8(len(teChunked)), teTrailing:
			r.valPos = teTrailing
		default:
			r.valPos = teMismatch
		}
	case r.valPos < int8(len(teChunked)) && lower(b) == teChunked[r.valPos]:
		r.valPos++
	default:
		r.valPos = teMismatch
	}
}

func (t *tracker) endTE() {
	r := &t.req
	if r.valPos != int8(len(teChunked)) && r.valPos != teTrailing {
		r.teBad = true
	}
	r.teCount++
	t.st = stFieldStart
}

// endHeader decides the verdict for the header block just ended and
// moves on to its body as net/http frames it.
func (t *tracker) endHeader() {
	r := &t.req
	t.limit, t.count = noLimit, 0
	if r.pri {
		// "PRI * HTTP/2.0" then an empty line is the HTTP/2 preface; what
		// follows is not HTTP/1. With fields, net/http serves it as an
		// HTTP/1 request with ProtoMajor 2, which take refuses.
		if r.fields == 0 {
			t.preface = true
			// The queue is never emptied, only reset in push right before
			// an append: empty, no header block came before this one.
			t.opened = len(t.q) == 0
		}
		t.die()
		return
	}

	te := r.teCount > 0
	v := allowed
	switch {
	case te && r.clCount > 0:
		v = bothLengths
	case te && r.http10:
		// RFC 9112 §6.1: the framing of such a message is faulty.
		// net/http ignores the field and frames by Content-Length.
		v = teInHTTP10
	case r.teCount > 1:
		v = multipleTE
	case r.teBad:
		v = unsupportedTE
	case r.clInvalid:
		v = unverifiable
	case r.clConflict:
		v = conflictingCL
	}

	res := result{
		line:        r.line,
		optionsStar: r.methodIs("OPTIONS") && r.uriN == 1 && r.uri0 == '*',
		verdict:     v,
	}
	if !t.push(res) {
		t.die()
		return
	}
	chunked := te && !r.http10
	if r.clInvalid || r.clConflict || chunked && (r.teCount > 1 || r.teBad) {
		t.die() // net/http answers 400 or 501 and closes the connection
		return
	}
	if r.methodIs("POST") {
		t.skipCRLF = postCRLFSlack
	}
	switch {
	case chunked:
		t.chunk = chunkState{}
		t.st = stChunkLine
	case r.cl > 0:
		t.remain = r.cl
		t.st = stBody
	default:
		t.st = stLineStart
	}
}

func lower(b byte) byte {
	if 'A' <= b && b <= 'Z' {
		return b + ('a' - 'A')
	}
	return b
}

// tokenByte reports whether b is a tchar (RFC 9110 §5.6.2).
func tokenByte(b byte) bool {
	const mask = 0 |
		(1<<10-1)<<'0' |
		(1<<26-1)<<'a' |
		(1<<26-1)<<'A' |
		1<<'!' | 1<<'#' | 1<<'$' | 1<<'%' | 1<<'&' | 1<<'\'' | 1<<'*' |
		1<<'+' | 1<<'-' | 1<<'.' | 1<<'^' | 1<<'_' | 1<<'`' | 1<<'|' | 1<<'~'
	return (uint64(1)<<b)&(mask&(1<<64-1))|(uint64(1)<<(b-64))&(mask>>64) != 0
}

// fieldValueByte reports whether net/http accepts b in a field value:
// VCHAR, SP, HTAB and obs-text.
func fieldValueByte(b byte) bool {
	return b == '\t' || b >= ' ' && b != 0x7f
}
