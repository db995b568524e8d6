package proxy

import (
	"errors"
	"io"
	"net/http"
	"strconv"
	"sync"

	"github.com/tiercache/tiercache/internal/metrics"
)

// A request body is read by the origin transport while it writes the
// origin request, so a client's malformed chunked framing, or a body that
// ends before its Content-Length, surfaces as a failed round trip. Those
// are the client's faults, not the origin's: the client gets a 4xx naming
// the problem, and neither the origin error metric nor the warn-level
// origin log hears of it.

// clientBodyError is a failure to read the client's request body.
type clientBodyError struct{ err error }

func (e *clientBodyError) Error() string { return "malformed request body: " + e.err.Error() }
func (e *clientBodyError) Unwrap() error { return e.err }

// clientBody wraps the body of an outbound request and remembers the first
// read error other than io.EOF. The transport returns a body read error as
// it is when it wins the race, but a cancelled context or a torn-down
// origin connection can be reported instead; the remembered error settles
// it either way.
type clientBody struct {
	rc  io.ReadCloser
	mu  sync.Mutex // the transport reads on its own goroutine
	err *clientBodyError
}

func (b *clientBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	if err != nil && err != io.EOF {
		ce := &clientBodyError{err: err}
		b.mu.Lock()
		if b.err == nil {
			b.err = ce
		}
		b.mu.Unlock()
		return n, ce
	}
	return n, err
}

func (b *clientBody) Close() error { return b.rc.Close() }

// failed returns the first read error, or nil.
func (b *clientBody) failed() *clientBodyError {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.err
}

// clientBodyFailure reports whether the round trip of out failed because
// the client's body could not be read, and returns that error.
func clientBodyFailure(out *http.Request, err error) (*clientBodyError, bool) {
	if ce, ok := errors.AsType[*clientBodyError](err); ok {
		return ce, true
	}
	if b, ok := out.Body.(failedBody); ok {
		if ce := b.failed(); ce != nil {
			return ce, true
		}
	}
	return nil, false
}

// failedBody is a request body that remembers why reading the client's
// body failed: clientBody, and the wrappers around it.
type failedBody interface{ failed() *clientBodyError }

// answerClientBody answers a request whose body could not be read: 413
// when a body limit (http.MaxBytesReader) cut it, 400 otherwise. The
// connection is closed after the answer, since its framing is lost. When
// the client is already gone (it closed mid-body) the answer goes nowhere,
// which is fine. Logged at debug: a client's mistake is no operator's
// alarm.
func (p *Proxy) answerClientBody(w http.ResponseWriter, r *http.Request, ce *clientBodyError) sent {
	p.log.Debug("request body unreadable", "method", r.Method, "path", r.URL.Path, "err", ce.err)
	w.Header()["Connection"] = []string{"close"}
	if mbe, ok := errors.AsType[*http.MaxBytesError](ce); ok {
		return errorAnswer(w, r, "request body larger than "+strconv.FormatInt(mbe.Limit, 10)+" bytes",
			http.StatusRequestEntityTooLarge)
	}
	return errorAnswer(w, r, ce.Error(), http.StatusBadRequest)
}

// failedLayer is the requests_total layer of a request whose origin round
// trip failed with err: none when the client's body was at fault.
func failedLayer(err error) string {
	if _, ok := errors.AsType[*clientBodyError](err); ok {
		return metrics.LayerNone
	}
	return metrics.LayerOrigin
}
