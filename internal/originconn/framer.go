package originconn

import (
	"bytes"
)

// The framer follows the responses on one origin connection exactly as
// net/http's Transport reads them (response.go ReadResponse, textproto
// ReadMIMEHeader, transfer.go readTransfer and readTrailer,
// internal/chunked.go), so that the byte at which it says an exchange
// ends is the byte after which the Transport looks for the next response.
// Where net/http refuses a response (and so closes the connection), the
// framer need not agree on details. Where it cannot be sure that it
// agrees with a response net/http accepts (a folded Content-Length, a
// trailer with bare LF line ends, an unusual HTTP version), it gives up:
// it stops cutting reads at response ends, and the Conn refuses the
// connection's next request instead.
const (
	// maxHeaderBlock bounds a status line and header block. The Transport
	// refuses one past its MaxResponseHeaderBytes (10 MiB by default; the
	// proxy's transport sets 1 MiB); past this bound the framer gives up
	// rather than hold more.
	maxHeaderBlock = 10<<20 + 64<<10

	// maxChunkLine is the longest chunk-size line net/http reads, CRLF
	// included: it must fit its 4 KiB bufio.Reader.
	maxChunkLine = 4096

	// maxTrailer is how far net/http looks for the CRLF CRLF that ends a
	// trailer section: within its 4 KiB buffer.
	maxTrailer = 4096

	// keepHeaderBuf: a header buffer grown past this is dropped after its
	// block, so that one large header does not stay with the connection.
	keepHeaderBuf = 16 << 10
)

type fstate uint8

const (
	fsIdle       fstate = iota // between exchanges
	fsHeader                   // status line and header block, collected in hdr
	fsBody                     // Content-Length body: remain bytes
	fsChunkLine                // chunk-size line, collected in hdr
	fsChunkData                // remain bytes of chunk data
	fsChunkCRLF                // the CRLF after chunk data; remain counts what is left of it
	fsTrailer                  // trailer section after the last chunk, collected in hdr
	fsUntilClose               // a body delimited by the connection's close: net/http does not reuse it
	fsTunnel                   // after 101 Switching Protocols: not HTTP any more
	fsLost                     // gave up: where responses end is not known
)

// framer is the per-connection response framing state.
type framer struct {
	st     fstate
	head   bool // the exchange answers a HEAD request
	hdr    []byte
	scan   int // how far hdr has been searched for the end of the block
	remain uint64
}

// passthrough reports whether the framer no longer cuts reads: the
// connection carries a close-delimited body, a tunnel, or framing it
// could not follow.
func (f *framer) passthrough() bool {
	return f.st == fsUntilClose || f.st == fsTunnel || f.st == fsLost
}

// begin starts the exchange of a request (head: a HEAD request).
func (f *framer) begin(head bool) {
	f.head = head
}

// feed follows p, bytes just read from the connection, and returns how
// many of them belong to the current exchange and whether it ended with
// the last of those. Bytes after the end are not consumed (n < len(p)):
// they are past the response. A framer that passes bytes through consumes
// all of p and never ends.
func (f *framer) feed(p []byte) (n int, done bool) {
	for n < len(p) {
		switch f.st {
		case fsIdle:
			f.st, f.hdr, f.scan = fsHeader, f.hdr[:0], 0
		case fsHeader:
			k, ok := f.collectBlock(p[n:])
			n += k
			if ok {
				if f.endHeader() {
					return n, true
				}
			}
		case fsBody, fsChunkData:
			k := uint64(len(p) - n)
			if k < f.remain {
				f.remain -= k
				return len(p), false
			}
			n += int(f.remain)
			f.remain = 0
			if f.st == fsBody {
				f.st = fsIdle
				return n, true
			}
			f.st, f.remain = fsChunkCRLF, 2
		case fsChunkCRLF:
			want := byte('\n')
			if f.remain == 2 {
				want = '\r'
			}
			if p[n] != want {
				f.giveUp()
				return len(p), false
			}
			n++
			if f.remain--; f.remain == 0 {
				f.st, f.hdr = fsChunkLine, f.hdr[:0]
			}
		case fsChunkLine:
			k, ok := f.collectLine(p[n:], maxChunkLine)
			n += k
			if ok {
				f.endChunkLine()
			}
		case fsTrailer:
			k, ok := f.collectTrailer(p[n:])
			n += k
			if ok {
				f.st = fsIdle
				f.dropLargeBuffer()
				return n, true
			}
		default: // passthrough
			return len(p), false
		}
	}
	return n, false
}

func (f *framer) giveUp() {
	f.st, f.hdr, f.scan, f.remain = fsLost, nil, 0, 0
}

func (f *framer) dropLargeBuffer() {
	if cap(f.hdr) > keepHeaderBuf {
		f.hdr = nil
	}
}

// collectBlock appends p to the header block until its empty line: a
// line that is empty or a lone CR once its LF is removed, as
// bufio.Reader.ReadLine reads it. It returns how much of p it took and
// whether the block is complete: then hdr[:scan] holds its lines, each
// with its LF, and the empty line follows.
func (f *framer) collectBlock(p []byte) (int, bool) {
	for i := 0; i < len(p); {
		j := bytes.IndexByte(p[i:], '\n')
		if j < 0 {
			f.hdr = append(f.hdr, p[i:]...)
			if len(f.hdr) > maxHeaderBlock {
				f.giveUp()
			}
			return len(p), false
		}
		f.hdr = append(f.hdr, p[i:i+j+1]...)
		i += j + 1
		if len(f.hdr) > maxHeaderBlock {
			f.giveUp()
			return len(p), false
		}
		start := f.scan // where this line began
		if n := len(f.hdr) - start; n == 1 || (n == 2 && f.hdr[start] == '\r') {
			if start == 0 {
				// net/http reads an empty status line as a malformed
				// response.
				f.giveUp()
				return len(p), false
			}
			return i, true
		}
		f.scan = len(f.hdr)
	}
	return len(p), false
}

// nextLine returns the first line of block (each line ends with LF)
// without its line end, as ReadLine reads it, and the rest.
func nextLine(block []byte) (line, rest []byte) {
	j := bytes.IndexByte(block, '\n')
	line, rest = block[:j], block[j+1:]
	if n := len(line); n > 0 && line[n-1] == '\r' {
		line = line[:n-1]
	}
	return line, rest
}

// endHeader decides, from the complete header block in hdr, how the
// response's body is framed, as readTransfer does; it reports whether
// the exchange ends with the block.
func (f *framer) endHeader() bool {
	line, rest := nextLine(f.hdr[:f.scan])
	status, http10, ok := statusLine(line)
	var (
		cl, te           []byte // the first values
		cls, tes         int    // how many fields
		clsDiffer        bool
		lastLen          bool // the previous field line was a Content-Length or Transfer-Encoding
		contentLength    = []byte("Content-Length")
		transferEncoding = []byte("Transfer-Encoding")
	)
	for ok && len(rest) > 0 {
		line, rest = nextLine(rest)
		if len(line) > 0 && (line[0] == ' ' || line[0] == '\t') {
			// obs-fold: net/http joins it to the previous field's value,
			// which the framer does not follow for the fields that frame
			// the body.
			ok = !lastLen
			continue
		}
		colon := bytes.IndexByte(line, ':')
		if colon < 0 {
			ok = false // net/http: malformed MIME header line
			break
		}
		name, value := line[:colon], trimOWS(line[colon+1:])
		switch {
		case bytes.EqualFold(name, contentLength):
			if cls == 0 {
				cl = trimSpace(value)
			} else if !bytes.Equal(trimSpace(value), cl) {
				clsDiffer = true
			}
			cls, lastLen = cls+1, true
		case bytes.EqualFold(name, transferEncoding):
			te, tes, lastLen = value, tes+1, true
		default:
			lastLen = false
		}
	}
	if !ok {
		f.giveUp()
		return false
	}
	chunked := false
	if tes > 0 && !http10 {
		if tes != 1 || !bytes.EqualFold(te, []byte("chunked")) {
			f.giveUp() // net/http refuses it (unsupported transfer coding)
			return false
		}
		chunked = true
	}
	var length uint64
	if cls > 0 {
		var valid bool
		if length, valid = decimal(cl); clsDiffer || !valid {
			f.giveUp() // net/http refuses differing or bad Content-Lengths
			return false
		}
	}
	f.hdr, f.scan = f.hdr[:0], 0
	switch {
	case status == 101:
		f.st, f.hdr = fsTunnel, nil
		return false
	case status >= 100 && status <= 199:
		// An interim response: the final one follows.
		f.st = fsHeader
		return false
	case f.head || status == 204 || status == 304 || !chunked && cls > 0 && length == 0:
		f.st = fsIdle
		f.dropLargeBuffer()
		return true
	case chunked:
		f.st = fsChunkLine
		return false
	case cls > 0:
		f.st, f.remain = fsBody, length
		f.dropLargeBuffer()
		return false
	}
	f.st, f.hdr = fsUntilClose, nil
	return false
}

// statusLine parses a status line as ReadResponse does (ok false: it
// refuses it). http10 reports a version below 1.1, for which net/http
// ignores Transfer-Encoding (and "HTTP/0.0", which it takes as 1.1, is
// not).
func statusLine(line []byte) (status int, http10, ok bool) {
	sp := bytes.IndexByte(line, ' ')
	if sp < 0 {
		return 0, false, false
	}
	proto, rest := line[:sp], line[sp+1:]
	major, minor, ok := httpVersion(proto)
	if !ok {
		return 0, false, false
	}
	http10 = (major != 0 || minor != 0) && (major < 1 || major == 1 && minor < 1)
	rest = bytes.TrimLeft(rest, " ")
	code := rest
	if sp := bytes.IndexByte(rest, ' '); sp >= 0 {
		code = rest[:sp]
	}
	if len(code) != 3 {
		return 0, false, false
	}
	for _, c := range code {
		if c < '0' || c > '9' {
			return 0, false, false
		}
		status = status*10 + int(c-'0')
	}
	return status, http10, true
}

// httpVersion is http.ParseHTTPVersion: "HTTP/" and one digit each for
// the major and minor version.
func httpVersion(v []byte) (major, minor int, ok bool) {
	if len(v) != len("HTTP/X.Y") || string(v[:5]) != "HTTP/" || v[6] != '.' ||
		v[5] < '0' || v[5] > '9' || v[7] < '0' || v[7] > '9' {
		return 0, 0, false
	}
	return int(v[5] - '0'), int(v[7] - '0'), true
}

// trimOWS trims spaces and tabs, as textproto does a field line and its
// value.
func trimOWS(b []byte) []byte {
	return bytes.Trim(b, " \t")
}

// trimSpace is textproto.TrimString: ASCII space, tab, CR and LF.
func trimSpace(b []byte) []byte {
	return bytes.Trim(b, " \t\r\n")
}

// decimal parses a Content-Length as strconv.ParseUint(v, 10, 63) does.
func decimal(v []byte) (uint64, bool) {
	if len(v) == 0 {
		return 0, false
	}
	var n uint64
	for _, c := range v {
		if c < '0' || c > '9' {
			return 0, false
		}
		if n > (1<<63-1)/10 {
			return 0, false
		}
		n = n*10 + uint64(c-'0')
		if n > 1<<63-1 {
			return 0, false
		}
	}
	return n, true
}

// collectLine appends p to hdr up to and including the next LF, within
// max bytes; it reports whether the line is complete.
func (f *framer) collectLine(p []byte, max int) (int, bool) {
	j := bytes.IndexByte(p, '\n')
	k := len(p)
	if j >= 0 {
		k = j + 1
	}
	f.hdr = append(f.hdr, p[:k]...)
	if len(f.hdr) > max {
		f.giveUp()
		return len(p), false
	}
	return k, j >= 0
}

// endChunkLine reads a chunk-size line as net/http does: CRLF at its end
// and no CR before, trailing spaces and tabs dropped, an extension after
// ';' ignored, then 1 to 16 hex digits.
func (f *framer) endChunkLine() {
	line := f.hdr
	if bytes.IndexByte(line, '\r') != len(line)-2 {
		f.giveUp()
		return
	}
	line = line[:len(line)-2]
	line = bytes.TrimRight(line, " \t")
	if semi := bytes.IndexByte(line, ';'); semi >= 0 {
		line = line[:semi]
	}
	if len(line) == 0 || len(line) > 16 {
		f.giveUp()
		return
	}
	var size uint64
	for _, c := range line {
		v, ok := hexVal(c)
		if !ok {
			f.giveUp()
			return
		}
		size = size<<4 | uint64(v)
	}
	f.hdr = f.hdr[:0]
	if size == 0 {
		f.st = fsTrailer
		return
	}
	f.st, f.remain = fsChunkData, size
}

// collectTrailer reads the trailer section after the last chunk. net/http
// takes CRLF right there as no trailers; otherwise it wants CRLF CRLF
// within its 4 KiB buffer and reads the section as a header block. The
// framer follows only sections whose every line ends in CRLF, so that the
// first CRLF CRLF is where net/http's header block ends; anything else
// makes it give up.
func (f *framer) collectTrailer(p []byte) (int, bool) {
	for i, c := range p {
		f.hdr = append(f.hdr, c)
		n := len(f.hdr)
		switch {
		case n > maxTrailer:
			f.giveUp()
			return len(p), false
		case c == '\n' && (n < 2 || f.hdr[n-2] != '\r'):
			f.giveUp() // a bare LF: net/http may end the section there
			return len(p), false
		case c == '\n' && (n == 2 || n >= 4 && f.hdr[n-3] == '\n'):
			return i + 1, true // CRLF alone, or CRLF CRLF
		}
	}
	return len(p), false
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
