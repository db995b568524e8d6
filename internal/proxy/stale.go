package proxy

import (
	"errors"
	"net/http"

	"github.com/tiercache/tiercache/internal/httpcache"
	"github.com/tiercache/tiercache/internal/metrics"
)

// A stored response standing in for an origin that failed: within
// stale-if-error (RFC 5861) after a 5xx or an error, within the tier's
// stale-if-unreachable window (RFC 9111 §4.2.4) when it could not be
// reached.

// staleOnError reports whether c's stored response may stand in for a
// failed origin (RFC 5861 stale-if-error).
func (p *Proxy) staleOnError(c *call) bool {
	return c.stale != nil && httpcache.StaleOnErrorOK(stored(c.stale), c.rcc, p.now())
}

// staleIfUnreachable reports whether c's stored response may stand in
// for an origin that could not be reached (err, RFC 9111 §4.2.4), within
// the window the tier gave it when it was stored.
func (p *Proxy) staleIfUnreachable(c *call, err error) bool {
	return c.stale != nil && unreachable(err) && httpcache.StaleIfUnreachableOK(stored(c.stale), c.rcc, p.now())
}

// serveStale serves c's stored response in place of the origin's answer:
// fwdStatus is the origin's status (a 5xx), 0 when it could not be asked.
func (p *Proxy) serveStale(w http.ResponseWriter, r *http.Request, c *call, fwdStatus int) outcome {
	body := c.body
	if body == nil {
		var st bodyState
		if body, st = p.openBody(r, c.key, c.stale); st != bodyOpened {
			sn := p.originError(w, r, verdict{x: xMiss, rule: c.rule, dbg: c.dbg, fwd: c.why}, errStaleBodyGone)
			return outcome{result: metrics.ResultError, layer: metrics.LayerOrigin, abort: false, sent: sn}
		}
		if body != nil {
			defer body.Close()
		}
	}
	v := verdict{x: pick(c.layer, xStaleL1, xStaleL2), rule: c.rule, dbg: c.dbg, fwd: c.why, fwdStatus: fwdStatus}
	sn := p.serveEntry(w, r, c.stale, httpcache.CurrentAge(stored(c.stale), p.now()), v, body)
	return outcome{result: metrics.ResultStale, layer: c.layer, abort: false, sent: sn}
}

// errStaleBodyGone: the origin failed and the stored response that could
// have stood in for it lost its body file.
var errStaleBodyGone = errors.New("origin failed and the stored response's body file is gone")
