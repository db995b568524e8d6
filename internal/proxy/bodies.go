package proxy

import (
	"io"
	"net/http"
	"strconv"

	"github.com/tiercache/tiercache/internal/bodystore"
	"github.com/tiercache/tiercache/internal/connguard"
	"github.com/tiercache/tiercache/internal/entry"
	"github.com/tiercache/tiercache/internal/httpcache"
	"github.com/tiercache/tiercache/internal/metrics"
	"github.com/tiercache/tiercache/internal/tierconfig"
)

// Bodies larger than the tier's bodyStore.threshold (and at most its
// bodyStore.maxObjectSize) are kept in files of the body store
// (Options.Bodies) while their entries, with a reference to the file,
// stay in L1. A hit copies a section of the file into the
// ResponseWriter, which net/http hands to connguard's connection's
// ReadFrom: sendfile from the section's offset, on a descriptor the body
// store keeps open for the file's hits. A fill
// writes the origin's body to the file at the origin's pace
// (fillfile.go); its own client and the waiters of a collapsed fill
// stream from the growing file (fillfeed.go), so a client that reads
// slowly holds up nobody but itself.

// A body section is sent by connguard's connection with sendfile.
var _ connguard.FileRegion = (*bodystore.Section)(nil)

// bodyLimits returns the tier's bodyStore.threshold and
// bodyStore.maxObjectSize.
func bodyLimits(cfg *tierconfig.Compiled) (threshold, maxObject int64) {
	return int64(cfg.Config.BodyThreshold()), int64(cfg.Config.BodyMaxObjectSize())
}

// bodyState is what openBody made of an entry's body file.
type bodyState uint8

const (
	// bodyOpened: the file is open, or the request needs none.
	bodyOpened bodyState = iota
	// bodyMissing: the file is gone, damaged or not the entry's, and
	// nothing brought it back: a miss, filled and stored anew.
	bodyMissing
	// bodyBusy: the file could not be opened for a reason of the moment
	// (bodystore.Transient: out of file descriptors or memory). The entry
	// and its file stay, to be served once that passes; this request
	// passes to the origin and nothing is stored, since a fill would
	// replace a valid entry and needs descriptors too.
	bodyBusy
)

// openBody opens the body file of e, stored under key, when r needs its
// body: a GET that is not answered 304. It returns nil (and bodyOpened)
// for an entry with an inline body and for a request that needs none:
// HEAD and 304 never open a file. A file that is gone or is not e's body
// (another key's, a replaced one) makes e unusable here: bodyLost copies
// the body back from L2 when it is there, else the request goes on as a
// miss (bodyMissing). A file that cannot be opened for now (bodyBusy)
// loses nothing.
func (p *Proxy) openBody(r *http.Request, key string, e *entry.Entry) (*bodystore.Body, bodyState) {
	if e.File == nil || r.Method != http.MethodGet || httpcache.NotModified(r.Header, e.Status, e) {
		return nil, bodyOpened
	}
	if p.bodies != nil {
		b, err := p.bodies.Open(key, *e.File)
		if err == nil {
			return b, bodyOpened
		}
		if bodystore.Transient(err) {
			// Counted by the body store (body_store_errors_total{op="open"});
			// under a flood of connections every hit may land here, so
			// not at a level that logs per request.
			p.log.Debug("stored body file not opened for now; passed to the origin", "key", key, "err", err)
			return nil, bodyBusy
		}
		if isGone(err) && e.File.Chunks > 0 && p.shb != nil {
			// Another replica's fill, with its body in L2.
			return p.openShared(r.Context(), key, e)
		}
		// Gone, damaged (which the store removes) or not this key's.
		p.log.Debug("stored body file unusable", "key", key, "err", err)
	}
	return p.bodyLost(r.Context(), key, e)
}

// passBusy answers r from the origin, storing nothing, when the body file
// of its stored response could not be opened for now (bodyBusy).
func (p *Proxy) passBusy(w http.ResponseWriter, r *http.Request, cfg *tierconfig.Compiled, rule *tierconfig.CompiledRule, dbg *debugInfo) outcome {
	if dbg != nil {
		dbg.why = whyBodyBusy
	}
	return p.pass(w, r, cfg, verdict{x: xMiss, rule: rule, fwd: fwdMiss, dbg: dbg}, metrics.ResultMiss)
}

// serveFile writes the body of a file-backed entry, whose header is in
// w.Header() already: the whole body or a single range, copied from the
// file into w so that net/http sends it with sendfile. HEAD needs no file.
func (p *Proxy) serveFile(w http.ResponseWriter, r *http.Request, e *entry.Entry, body *bodystore.Body) sent {
	h := w.Header()
	size := e.File.Size
	status, off, n := e.Status, int64(0), size
	if e.Status == http.StatusOK && r.Method == http.MethodGet && len(r.Header["Range"]) > 0 {
		br, res := httpcache.EvalRange(r.Header, e, size)
		switch res {
		case httpcache.RangeSatisfiable:
			status, off, n = http.StatusPartialContent, br.Start, br.End+1-br.Start
			h["Content-Range"] = []string{"bytes " + strconv.FormatInt(br.Start, 10) + "-" +
				strconv.FormatInt(br.End, 10) + "/" + strconv.FormatInt(size, 10)}
		case httpcache.RangeUnsatisfiable:
			status, n = http.StatusRequestedRangeNotSatisfiable, 0
			h["Content-Range"] = []string{"bytes */" + strconv.FormatInt(size, 10)}
		}
	}
	if !bodyAllowed(status) {
		w.WriteHeader(status)
		return sent{status: status}
	}
	h["Content-Length"] = []string{strconv.FormatInt(n, 10)}
	if r.Method == http.MethodHead || n == 0 {
		w.WriteHeader(status)
		return sent{status: status}
	}
	if body == nil {
		// openBody opens the file of every GET that needs a body; not
		// having it here is a bug, and a short response must not look
		// complete.
		p.log.Error("file-backed entry served without its body file", "path", r.URL.Path)
		panic(http.ErrAbortHandler)
	}
	w.WriteHeader(status)
	// The header goes out with the body's first bytes in one segment
	// (connguard.BodyFollows): flushed now, so that net/http's ReadFrom
	// finds it written and hands the file to the connection at once,
	// instead of copying 512 bytes through user space first. A header
	// without Content-Type is left to net/http, which sniffs the type from
	// those bytes (as it does for every other response).
	fl, more := w.(http.Flusher)
	more = more && len(h["Content-Type"]) > 0
	if more {
		connguard.BodyFollows(r.Context())
		fl.Flush()
	}
	// io.Copy finds w's ReadFrom (net/http's response), which hands the
	// *bodystore.Section to connguard's connection: sendfile from the
	// section's offset in the file.
	written, err := io.Copy(w, body.Section(off, n))
	if err != nil && r.Context().Err() == nil {
		p.log.Debug("serving a body file failed", "path", r.URL.Path, "err", err)
	}
	if more {
		connguard.Push(r.Context())
	}
	return sent{status: status, bytes: written}
}

// writeEntryHeader fills h with what serveEntry sends for e: the stored
// fields, Age and Via (the caller adds X-Cache and Cache-Status).
func writeEntryHeader(h http.Header, e *entry.Entry, ageValue string) {
	for i := range e.Header {
		f := &e.Header[i]
		h[f.Name] = append(h[f.Name], f.Value)
	}
	h["Age"] = []string{ageValue}
	appendVia(h)
}

// notModified answers 304 with the header already in w.
func notModified(w http.ResponseWriter) {
	httpcache.OmitForNotModified(w.Header())
	w.WriteHeader(http.StatusNotModified)
}
