package connguard

import (
	"bytes"
	"sync"
)

// The tracker follows the request stream exactly as net/http's server
// reads it (request.go readRequest, textproto ReadMIMEHeader, transfer.go
// readTransfer, internal/chunked.go) so that its k-th header block is
// net/http's k-th request. Where net/http refuses a request and closes
// the connection, the tracker need not agree on details and simply gives
// up. Where net/http reports a body error but may keep reading the
// connection (chunked framing and trailers), the tracker is at least as
// strict, so it gives up no later than net/http loses its footing.
const (
	// maxHeaderBlock bounds how far the tracker follows one request line
	// and header block. net/http refuses a block once it has read
	// MaxHeaderBytes (1 MiB by default) plus 4 KiB, so with default
	// settings a longer block never reaches a handler; the margin keeps
	// the tracker from stopping first.
	maxHeaderBlock = 1<<20 + 64<<10

	// maxChunkLine is the longest chunk-size line, without CRLF, that
	// net/http accepts: line and CRLF must fit its 4 KiB bufio.Reader.
	maxChunkLine = 4096 - 2

	// maxTrailer is the longest trailer section net/http reads as one:
	// it looks for the closing CRLF CRLF only within its 4 KiB buffer and
	// otherwise fails the body, leaving the trailer bytes unread.
	maxTrailer = 4096

	// maxChunkExcess is net/http's cap on chunk overhead beyond 16 bytes
	// per chunk plus twice the data ("too much non-data").
	maxChunkExcess = 16 << 10

	// postCRLFSlack: after a POST, net/http skips up to this many CR or LF
	// bytes before the next request line (tolerance for old clients).
	postCRLFSlack = 4

	// netHTTPReadAhead is how many bytes the tracker can have seen that
	// net/http has not yet consumed: net/http's server reads a connection
	// only through its 4 KiB bufio.Reader (header blocks fill it; body
	// reads are limited to the body's own framing, by Content-Length or
	// by the current chunk, so they never read past the body) plus the
	// single byte of its background read, which it starts while a handler
	// runs and hands to the bufio.Reader on its next fill.
	netHTTPReadAhead = 4096 + 1

	// minHeaderBlock is the shortest byte sequence for which the tracker
	// records a result: "M" SP SP "HTTP/1.0" LF LF.
	minHeaderBlock = 13

	// maxPending bounds the results waiting for Middleware. It is not a
	// limit on pipelining, only on how far the tracker can run ahead of
	// net/http:
	//   - every header block whose request net/http has not begun to read
	//     lies wholly in the read-ahead, so there are at most
	//     netHTTPReadAhead/minHeaderBlock of them, however many requests a
	//     client pipelines in one write;
	//   - one more is the request net/http is reading or has handed to the
	//     handler, which has not called take yet;
	//   - and a few more are runs of "OPTIONS *" that net/http answered
	//     itself, left for the next take to skip (push merges a run of
	//     identical ones into one result).
	// A stream that still fills the queue is one net/http is not reading
	// as HTTP/1 requests any more (a hijacked connection, such as a
	// WebSocket, carrying request-shaped bytes) or a client that
	// interleaves different "OPTIONS *" lines by the hundred; the tracker
	// gives up on it. The queue, 16 bytes a result, stays under 6 KiB per
	// connection whatever the client sends.
	maxPending = netHTTPReadAhead/minHeaderBlock + 4
)

type state uint8

const (
	stLineStart  state = iota // before a request line
	stReqLine                 // inside the request line
	stFieldStart              // at the start of a field line or the empty line
	stFieldName
	stFieldSkip // rest of a line that does not affect framing
	stCLValue
	stTEValue
	stCR          // saw CR; only LF may follow, which ends the line begun in crFrom
	stBody        // Content-Length body: remain bytes
	stChunkLine   // chunk-size [ws] [; ext] CRLF
	stChunkData   // remain bytes of chunk data
	stChunkDataCR // CR LF after chunk data
	stChunkDataLF
	stTrailerStart // right after the last-chunk line
	stTrailerName
	stTrailerValue
	stTrailerLineStart
	stDead // gave up: every later request is unverifiable
)

type fieldKind uint8

const (
	fieldOther fieldKind = iota
	fieldCL
	fieldTE
)

// reqState is reset for every request.
type reqState struct {
	field   uint8 // 0 method, 1 request-target, 2 protocol
	method  [8]byte
	methodN int
	uri0    byte
	uriN    int
	proto   [8]byte
	protoN  int
	line    uint64 // FNV-1a of the request line so far

	http10 bool
	pri    bool // "PRI * HTTP/2.0"
	fields int

	nameN     int
	nameMatch uint8 // bit set of fieldKind candidates still matching
	lastKind  fieldKind

	clCount    int
	cl         uint64
	clInvalid  bool
	clConflict bool
	teCount    int
	teBad      bool

	// value of the Content-Length or Transfer-Encoding line being read
	val     uint64
	valPos  int8 // see clByte and teByte
	valOver bool
}

// noLimit is the bound outside header blocks and trailer sections.
const noLimit = int(^uint(0) >> 1)

// tracker is the per-connection framing state machine. feed runs on
// whichever goroutine reads the connection; Middleware takes results on
// the handler's goroutine. mu guards everything: net/http never reads a
// connection from two goroutines at once, but a handler that hijacks it
// may, and one uncontended lock per read costs nothing next to the read.
type tracker struct {
	mu sync.Mutex

	st     state
	crFrom state
	// count bytes of the current header block or trailer section have
	// been seen; more than limit and the tracker stops (overLimit).
	count    int
	limit    int
	skipCRLF int
	remain   uint64
	req      reqState
	chunk    chunkState

	q       []result
	head    int
	preface bool
	// opened: the preface was the connection's first header block (see
	// OpenedWithPreface).
	opened bool
}

// feed advances the tracker over p, bytes net/http has just read. Body
// bytes are skipped in O(1); header bytes are looked at once each.
func (t *tracker) feed(p []byte) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for i := 0; i < len(p); {
		switch t.st {
		case stDead:
			return
		case stBody, stChunkData:
			n := uint64(len(p) - i)
			if n < t.remain {
				t.remain -= n
				return
			}
			i += int(t.remain)
			t.remain = 0
			if t.st == stBody {
				t.st = stLineStart
			} else {
				t.st = stChunkDataCR
			}
		case stFieldSkip:
			j := bytes.IndexByte(p[i:], '\n')
			n := len(p) - i
			if j >= 0 {
				n = j + 1
			}
			if t.count += n; t.count > t.limit {
				t.overLimit()
				return
			}
			i += n
			if j >= 0 {
				t.st = stFieldStart
			}
		default:
			if t.st == stReqLine && t.req.field == 1 {
				if n := t.targetRun(p[i:]); n > 0 {
					i += n
					continue
				}
			}
			if t.count++; t.count > t.limit {
				t.overLimit()
				return
			}
			t.step(p[i])
			i++
		}
	}
}

// targetRun takes the request-target bytes at the start of p, up to SP,
// CR or LF, in one loop rather than one step each (the request-target is
// most of a request line), and returns how many it took. It looks no
// further than the header block limit allows (so a target past the limit
// costs linear time, not a rescan per byte) and leaves the byte that
// crosses it to the byte-wise path.
func (t *tracker) targetRun(p []byte) int {
	r := &t.req
	p = p[:min(len(p), t.limit-t.count)]
	h, n := r.line, 0
	for ; n < len(p); n++ {
		b := p[n]
		if b == ' ' || b == '\r' || b == '\n' {
			break
		}
		h = (h ^ uint64(b)) * fnvPrime
	}
	if n == 0 {
		return 0
	}
	if r.uriN == 0 {
		r.uri0 = p[0]
	}
	r.uriN += n
	r.line = h
	t.count += n
	return n
}

func (t *tracker) overLimit() {
	if t.limit == maxHeaderBlock {
		// net/http has refused this block already unless MaxHeaderBytes
		// was raised; either way it is not evidence of smuggling. The
		// boundary of the next request is unknown, though.
		t.push(result{anyLine: true, verdict: allowed})
	}
	t.die()
}

// die gives up on the connection. The parse state is cleared: nothing
// reads it any more, and a cleared state is the same however the stream
// was split into reads.
func (t *tracker) die() {
	t.st, t.crFrom, t.limit, t.count, t.skipCRLF, t.remain = stDead, 0, noLimit, 0, 0, 0
	t.req, t.chunk = reqState{}, chunkState{}
}

func (t *tracker) step(b byte) {
	switch t.st {
	case stLineStart:
		if t.skipCRLF > 0 && (b == '\r' || b == '\n') {
			t.skipCRLF--
			return
		}
		t.skipCRLF = 0
		t.req = reqState{line: fnvOffset}
		t.st = stReqLine
		t.limit, t.count = maxHeaderBlock, 1
		t.reqLineByte(b)
	case stReqLine:
		t.reqLineByte(b)
	case stFieldStart:
		t.fieldStart(b)
	case stFieldName:
		t.nameByte(b)
	case stCLValue:
		t.clByte(b)
	case stTEValue:
		t.teByte(b)
	case stCR:
		if b != '\n' {
			// net/http strips CR only right before LF; a CR anywhere else
			// in a header block makes it refuse the request, and in chunked
			// framing it is an error.
			t.die()
			return
		}
		t.endLine(t.crFrom)
	case stChunkLine:
		t.chunkLineByte(b)
	case stChunkDataCR:
		if b != '\r' {
			t.die()
			return
		}
		t.st = stChunkDataLF
	case stChunkDataLF:
		if b != '\n' {
			t.die()
			return
		}
		t.chunk = chunkState{excess: t.chunk.excess}
		t.st = stChunkLine
	case stTrailerStart, stTrailerLineStart, stTrailerName, stTrailerValue:
		t.trailerByte(b)
	}
}

// endLine finishes the line that was being read in state from.
func (t *tracker) endLine(from state) {
	switch from {
	case stReqLine:
		t.endRequestLine()
	case stFieldStart:
		t.endHeader()
	case stCLValue:
		t.endCL()
	case stTEValue:
		t.endTE()
	case stChunkLine:
		t.endChunkLine()
	case stTrailerValue:
		t.st = stTrailerLineStart
	case stTrailerStart, stTrailerLineStart:
		t.endBody()
	default:
		t.die()
	}
}
