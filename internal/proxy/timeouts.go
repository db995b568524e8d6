package proxy

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptrace"
	"strings"
	"sync/atomic"
	"time"

	"github.com/tiercache/tiercache/internal/tierconfig"
)

// Origin timeouts (docs/operations.md "Timeouts"). Nothing bounds an origin
// exchange as a whole, so that a healthy stream (Server-Sent Events, long
// polling, a large download, a slow but steady upload) is never cut:
//
//   - while the request is sent, its body may stand still for at most
//     origin.idleTimeout;
//   - once it is sent, the response headers must come within
//     origin.responseHeaderTimeout;
//   - the response body may stand still for at most origin.idleTimeout;
//   - a fill whose response is being stored has origin.timeout from its
//     start; past it the fill stops storing (its waiters fetch for
//     themselves) and the client keeps receiving under the idle timeout.
//
// A watchdog enforces the first three with one timer per exchange, re-armed
// by the reads that make progress, never a goroutine per read.

// phase is where an origin exchange is; it picks the timeout that applies
// and names it when it passes.
type phase uint32

const (
	phaseSending phase = iota // connecting, writing the request and its body
	phaseHeaders              // request written, waiting for response headers
	phaseBody                 // reading the response body
	phaseDone                 // finished: the timer no longer cuts anything
)

// timeoutError is why a watchdog cut an exchange. It unwraps to
// context.DeadlineExceeded, so that callers that only know about deadlines
// answer 504.
type timeoutError struct {
	msg   string
	limit time.Duration
	// client: the client's request body stood still, not the origin.
	client bool
	// unreachable: the origin did not take the request (connecting to it
	// and sending the request stood still), as opposed to a slow answer.
	unreachable bool
}

func (e *timeoutError) Error() string { return e.msg + " (" + e.limit.String() + ")" }
func (e *timeoutError) Unwrap() error { return context.DeadlineExceeded }

// watchdog enforces the timeouts of one origin exchange by cancelling its
// context, with a timeoutError as the cause.
type watchdog struct {
	header, idle time.Duration
	// client is the response to the request whose body is sent: a stalled
	// upload is ended through it.
	client http.ResponseWriter
	ctx    context.Context
	cancel context.CancelCauseFunc
	timer  *time.Timer
	phase  atomic.Uint32
	// inClientRead is set while the transport waits on the client's
	// request body, so that an idle upload is blamed on the client.
	inClientRead atomic.Bool

	// store is the total bound of a fill being stored; late is set when
	// it passed.
	store *time.Timer
	late  atomic.Bool
	// storeBy is the deadline storeUntil set (zero before): what a
	// piece file being written aborts at (partSink).
	storeBy time.Time

	// up is the client's request body as sent (sending), nil without one.
	up *uploadBody
}

// watch starts the watchdog of one origin exchange under parent, for the
// client request answered through w. The request sent with the returned
// context must have its body wrapped by sending and its response body by
// receiving. close must be called.
func (p *Proxy) watch(parent context.Context, o *tierconfig.Origin, w http.ResponseWriter) (context.Context, *watchdog) {
	ctx, cancel := context.WithCancelCause(parent)
	wd := &watchdog{header: o.ResponseHeaderTimeout.Std(), idle: o.IdleTimeout.Std(), client: w, cancel: cancel}
	wd.timer = time.AfterFunc(wd.idle, wd.expire)
	// Composes with the trace roundTrip adds for interim responses.
	wd.ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{WroteRequest: wd.wroteRequest})
	return wd.ctx, wd
}

func (wd *watchdog) expire() {
	var cause *timeoutError
	switch phase(wd.phase.Load()) {
	case phaseSending:
		if wd.inClientRead.Load() {
			cause = &timeoutError{msg: "the client's request body stood still for origin.idleTimeout", limit: wd.idle, client: true}
			wd.cancel(cause)
			// The transport does not return before its read of the body
			// does, and net/http would drain the body after the handler:
			// end the read instead of waiting on a client that sends
			// nothing.
			if wd.client != nil {
				_ = http.NewResponseController(wd.client).SetReadDeadline(time.Now())
			}
			return
		}
		cause = &timeoutError{msg: "the origin did not take the request for origin.idleTimeout", limit: wd.idle, unreachable: true}
	case phaseHeaders:
		cause = &timeoutError{msg: "the origin sent no response headers within origin.responseHeaderTimeout", limit: wd.header}
	case phaseBody:
		cause = &timeoutError{msg: "the origin's response body stood still for origin.idleTimeout", limit: wd.idle}
	default:
		return
	}
	wd.cancel(cause)
}

// wroteRequest runs on the transport's goroutine once the request and its
// body are written: the wait for the response headers begins. A response
// that came earlier (before the body was all sent) is not set back.
func (wd *watchdog) wroteRequest(httptrace.WroteRequestInfo) {
	if wd.phase.CompareAndSwap(uint32(phaseSending), uint32(phaseHeaders)) {
		wd.timer.Reset(wd.header)
	}
}

// sending wraps the request body sent to the origin: each read that
// brings bytes re-arms the idle timeout.
//
// It also lets the answer go out while the body is still on its way, as
// a proxy must: an origin may answer before it has read the body (a 401,
// a 404 for a path it does not serve, a 413), and a client may stop
// sending it. By default net/http reads what a handler left of the
// request body before it writes the answer's header, with no timeout,
// and the transport's read of the same body holds the body's lock: the
// answer waited on a client that sends nothing, holding the connection
// and a goroutine for as long as that client liked (--max-connections
// closes idle connections only). In full-duplex mode it does not; the
// answer says Connection: close while the body is unfinished
// (answering), and close ends the client's read that is still waiting
// (endUpload).
func (wd *watchdog) sending(body io.ReadCloser) io.ReadCloser {
	if body == nil || body == http.NoBody {
		return body
	}
	wd.up = &uploadBody{ReadCloser: body, wd: wd}
	if wd.client != nil {
		_ = http.NewResponseController(wd.client).EnableFullDuplex()
	}
	return wd.up
}

// answering marks the answer about to be written to close the connection
// when the client's request body has not all been read: what is left of
// it must not be parsed as the next request, and net/http, in full-duplex
// mode (sending), no longer sees to that itself.
func (wd *watchdog) answering(h http.Header) {
	if wd.up != nil && !wd.up.ended.Load() {
		h["Connection"] = []string{"close"}
	}
}

// endUpload ends a read of the client's request body that still waits
// once the exchange is over (a client that stopped sending after the
// answer): the transport's read returns, and so does net/http's close of
// the body after the handler, which would otherwise read on.
func (wd *watchdog) endUpload() {
	if wd.up != nil && !wd.up.ended.Load() && wd.client != nil {
		_ = http.NewResponseController(wd.client).SetReadDeadline(time.Now())
	}
}

type uploadBody struct {
	io.ReadCloser
	wd *watchdog
	// ended: a read returned io.EOF, the body's end as net/http framed
	// it: what follows on the connection is the next request. Any other
	// error leaves the body unfinished, whatever is read of it next: a
	// chunk-size line that is no number fails the body where the next
	// bytes, the rest of it, would be parsed as a request.
	ended atomic.Bool
}

// failed passes on the client body's failure (clientBodyFailure).
func (b *uploadBody) failed() *clientBodyError {
	if f, ok := b.ReadCloser.(failedBody); ok {
		return f.failed()
	}
	return nil
}

func (b *uploadBody) Read(p []byte) (int, error) {
	b.wd.inClientRead.Store(true)
	n, err := b.ReadCloser.Read(p)
	b.wd.inClientRead.Store(false)
	if err == io.EOF {
		b.ended.Store(true)
	}
	// The end of the body is progress too (a chunked body's last chunk
	// brings no bytes): a body read ahead (reqbuffer.go) ends before the
	// origin is contacted, which must then have the whole idle timeout,
	// not what the client's pause before its last chunk left of it.
	if n > 0 || err == io.EOF {
		b.progress()
	}
	return n, err
}

// progress re-arms the idle timeout while the request is sent. A body
// read ahead (bufferedBody) calls it as the transport takes its chunks:
// the origin taking them is progress, and its stalls are its own, so
// it does not set inClientRead.
func (b *uploadBody) progress() {
	if phase(b.wd.phase.Load()) == phaseSending {
		b.wd.timer.Reset(b.wd.idle)
	}
}

// receiving is called once the response headers are in; it returns body
// wrapped so that each read that brings bytes re-arms the idle timeout.
func (wd *watchdog) receiving(body io.ReadCloser) io.ReadCloser {
	wd.phase.Store(uint32(phaseBody))
	wd.timer.Reset(wd.idle)
	return &responseBody{ReadCloser: body, wd: wd}
}

type responseBody struct {
	io.ReadCloser
	wd *watchdog
}

func (b *responseBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if n > 0 && phase(b.wd.phase.Load()) == phaseBody {
		b.wd.timer.Reset(b.wd.idle)
	}
	return n, err
}

// clientTook re-arms the idle timeout of a response body that is not
// being read from the origin because the proxy waits for its client to
// take what it already has (fillclient.go): a client that takes bytes
// keeps the exchange moving, as when body and client go in step.
func (wd *watchdog) clientTook() {
	if phase(wd.phase.Load()) == phaseBody {
		wd.timer.Reset(wd.idle)
	}
}

// storeUntil bounds a fill being stored: at deadline, late is set and
// giveUp runs (on the timer's goroutine) to release the fill's waiters.
func (wd *watchdog) storeUntil(deadline time.Time, giveUp func()) {
	wd.storeBy = deadline
	wd.store = time.AfterFunc(time.Until(deadline), func() {
		wd.late.Store(true)
		giveUp()
	})
}

// stopStoring drops the total bound of a fill that will not be stored.
func (wd *watchdog) stopStoring() {
	if wd.store != nil {
		wd.store.Stop()
	}
}

// stop ends the watch: nothing is cut from now on, and the context stays
// usable (for storing) until close.
func (wd *watchdog) stop() {
	wd.phase.Store(uint32(phaseDone))
	wd.timer.Stop()
	wd.stopStoring()
}

// close stops the watch and releases its context, and ends a read of the
// client's request body still waiting (endUpload).
func (wd *watchdog) close() {
	wd.stop()
	wd.cancel(context.Canceled)
	wd.endUpload()
}

// reason returns why the exchange failed: the watchdog's timeout when it
// cut it, err otherwise.
func (wd *watchdog) reason(err error) error {
	var te *timeoutError
	if errors.As(context.Cause(wd.ctx), &te) {
		return te
	}
	return err
}

// originFailed answers a client whose origin request failed before the
// response headers: 408 when the client's own upload stood still,
// otherwise as originError (504 for a timeout, 502 else).
func (p *Proxy) originFailed(w http.ResponseWriter, r *http.Request, v verdict, wd *watchdog, err error) sent {
	wd.answering(w.Header())
	err = wd.reason(err)
	var te *timeoutError
	if errors.As(err, &te) && te.client {
		p.log.Info("request body stood still; answered 408", "method", r.Method, "path", r.URL.Path, "err", err)
		h := w.Header()
		p.setStatus(h, v.with(xBypass), http.StatusRequestTimeout)
		h["Connection"] = []string{"close"}
		return errorAnswer(w, r, "request timeout: "+err.Error(), http.StatusRequestTimeout)
	}
	return p.originError(w, r, v, err)
}

// bodyFailed logs a response body the proxy broke off because the origin
// stood still (the client sees a broken response). Other read errors
// (the origin reset the connection, the client left) are not logged here.
func (p *Proxy) bodyFailed(r *http.Request, wd *watchdog, err error) {
	var te *timeoutError
	if errors.As(wd.reason(err), &te) {
		p.log.Warn("origin response cut", "method", r.Method, "path", r.URL.Path, "err", te)
	}
}

// isEventStream reports a Server-Sent Events response: a stream of events
// is not a document to store, however cacheable its headers look (SSE
// origins often send only Cache-Control: no-cache, which allows storing).
// Treating it as uncacheable also makes later requests for it skip
// coalescing (hit-for-miss), so that each client gets its own stream at
// once instead of waiting behind another's.
func isEventStream(h http.Header) bool {
	ct := h.Get("Content-Type")
	if i := strings.IndexByte(ct, ';'); i >= 0 {
		ct = ct[:i]
	}
	return strings.EqualFold(strings.TrimSpace(ct), "text/event-stream")
}
