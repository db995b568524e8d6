package connguard

import "math"

// verdict is what the tracker concluded about one request header block.
type verdict uint8

const (
	allowed verdict = iota
	bothLengths
	multipleTE
	unsupportedTE
	conflictingCL
	teInHTTP10
	// unverifiable: the tracker lost the request boundaries (malformed
	// framing, HTTP/2 preface, queue overflow) or could not match the
	// request net/http parsed to a header block it saw.
	unverifiable
)

// reason is the plain-text body of the 400 answer.
func (v verdict) reason() string {
	switch v {
	case allowed:
		return ""
	case bothLengths:
		return "request has both Content-Length and Transfer-Encoding"
	case multipleTE:
		return "request has more than one Transfer-Encoding"
	case unsupportedTE:
		return "request has a Transfer-Encoding other than chunked"
	case conflictingCL:
		return "request has conflicting Content-Length values"
	case teInHTTP10:
		return "HTTP/1.0 request has Transfer-Encoding"
	default:
		return "request framing could not be verified"
	}
}

// result is the tracker's record of one header block, queued until
// Middleware consumes it.
type result struct {
	// line is the FNV-1a hash of the request line. Middleware checks it
	// against the request net/http parsed, so a request the tracker did not
	// expect (see take) fails closed instead of borrowing another block's
	// verdict.
	line uint64
	// anyLine marks a block the tracker stopped following before its
	// request line was hashed (header block over maxHeaderBlock).
	anyLine bool
	// optionsStar marks "OPTIONS * ...": unless
	// Server.DisableGeneralOptionsHandler is set, net/http answers it itself
	// and Middleware never sees it.
	optionsStar bool
	verdict     verdict
	// repeats counts further identical header blocks merged into this
	// result (see push); it is only ever set on an allowed "OPTIONS *".
	repeats uint32
}

// push records a finished header block. It reports false, and gives up on
// the connection, when maxPending results are already waiting, which a
// client net/http is serving cannot cause (see maxPending).
//
// An allowed "OPTIONS *" identical to the result queued last is merged
// into it: net/http answers such requests itself (unless
// Server.DisableGeneralOptionsHandler is set), so they stay queued until
// the next take, and a client repeating one must not fill the queue.
//
// Called from feed, with t.mu held.
func (t *tracker) push(r result) bool {
	if t.head == len(t.q) {
		t.q, t.head = t.q[:0], 0
	}
	if r.optionsStar && r.verdict == allowed && t.head < len(t.q) {
		if last := &t.q[len(t.q)-1]; last.optionsStar && last.verdict == allowed &&
			last.line == r.line && last.repeats < math.MaxUint32 {
			last.repeats++
			return true
		}
	}
	if len(t.q)-t.head >= maxPending {
		return false
	}
	if len(t.q) == cap(t.q) {
		if t.head > 0 {
			n := copy(t.q, t.q[t.head:])
			t.q, t.head = t.q[:n], 0
		} else {
			// Grow by hand so that the capacity, too, stops at maxPending.
			q := make([]result, len(t.q), min(max(2*cap(t.q), 4), maxPending))
			copy(q, t.q)
			t.q = q
		}
	}
	t.q = append(t.q, r)
	return true
}

// take returns the verdict for the next request net/http hands to a
// handler on this connection. net/http serves one HTTP/1 request at a time
// per connection and in order, so the next queued result belongs to it,
// with one exception: a queued "OPTIONS *" that net/http answered itself.
// Such results are skipped; if one was suspicious, its verdict refuses
// this request, since the connection may already carry a smuggled one.
func (t *tracker) take(protoMajor int, line uint64) verdict {
	t.mu.Lock()
	defer t.mu.Unlock()
	if protoMajor != 1 {
		// HTTP/2 has no Content-Length/Transfer-Encoding ambiguity. Only a
		// connection that opened with the preface may carry such requests;
		// "PRI * HTTP/2.0" with header fields is served by net/http's HTTP/1
		// code with ProtoMajor 2 and must not slip through here.
		if t.preface {
			return allowed
		}
		return unverifiable
	}
	for t.head < len(t.q) {
		r := &t.q[t.head]
		if r.anyLine || r.line == line {
			if r.repeats > 0 {
				r.repeats-- // one of a merged run of "OPTIONS *"
			} else {
				t.head++
			}
			return r.verdict
		}
		t.head++
		if r.optionsStar {
			if r.verdict != allowed {
				return r.verdict
			}
			continue
		}
		break
	}
	// Either the tracker gave up before this request's header block, or
	// net/http produced a request the tracker did not expect.
	return unverifiable
}

// FNV-1a, 64 bit.
const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

func fnvString(h uint64, s string) uint64 {
	for i := 0; i < len(s); i++ {
		h = (h ^ uint64(s[i])) * fnvPrime
	}
	return h
}

// requestLineHash hashes "method SP request-target SP protocol" the way
// the tracker hashes the bytes of the request line; net/http keeps all
// three parts verbatim in Request.Method, RequestURI and Proto.
func requestLineHash(method, uri, proto string) uint64 {
	h := fnvString(fnvOffset, method)
	h = (h ^ ' ') * fnvPrime
	h = fnvString(h, uri)
	h = (h ^ ' ') * fnvPrime
	return fnvString(h, proto)
}
