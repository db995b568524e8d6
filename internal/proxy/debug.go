package proxy

import (
	"crypto/subtle"
	"net/http"
	"strconv"
	"time"

	"github.com/tiercache/tiercache/internal/httpcache"
	"github.com/tiercache/tiercache/internal/tierconfig"
)

// debugHeader is the request field that asks for the cache's decision
// (its value: the tier's purge token) and the response field that carries
// it. The request's field never reaches the origin.
const debugHeader = "Tiercache-Debug"

// Proxy-level reasons a response was not stored, beside httpcache's Why
// values.
const (
	whyBypass = "bypass" // a rule or the request's shape bypassed the cache
	// the readings of the path select different rules (originview)
	whyAmbiguousPath = "ambiguous-path"
	whyTooLarge      = "too-large"    // larger than the tier stores
	whyEventStream   = "event-stream" // text/event-stream is never stored
	whyHead          = "head"         // a HEAD miss is passed, its answer not stored
	whyBodyBusy      = "body-busy"    // the stored body file could not be opened for now (out of descriptors): passed
)

// debugInfo is what a debug request is told about the cache's decision.
// Only debug requests have one: the others carry a nil pointer.
type debugInfo struct {
	key string // the storage key (it may contain keyed header values)
	// decided: the origin's response went through httpcache.Decide.
	decided bool
	d       httpcache.Decision
	// why not stored when decided by the proxy rather than Decide.
	why string
}

// debugRequest removes the debug field from r and returns a debugInfo when
// it carried the tier's purge token. A wrong token, or a tier without one,
// is the same as no field: no error, nothing logged, nothing different in
// what is served or stored.
func debugRequest(r *http.Request, cfg *tierconfig.Compiled) *debugInfo {
	v, ok := r.Header[debugHeader]
	if !ok {
		return nil
	}
	delete(r.Header, debugHeader)
	token := cfg.Config.Purge.Token
	if token == "" || len(v) != 1 || subtle.ConstantTimeCompare([]byte(v[0]), []byte(token)) != 1 {
		return nil
	}
	return &debugInfo{}
}

// bypass returns d (which may be nil) marked as bypassing the cache.
func (d *debugInfo) bypass() *debugInfo {
	if d != nil {
		d.why = whyBypass
	}
	return d
}

// value is the response's Tiercache-Debug field, a Structured Fields
// dictionary (RFC 8941 §3.2): rule, key, what happened, and for a
// response from the origin whether it was stored, why not, the freshness
// source and lifetime; for one served from the cache, the lifetime it was
// stored with (hasLifetime; Cache-Status's ttl says what is left).
func (d *debugInfo) value(v verdict, lifetime time.Duration, hasLifetime bool) string {
	b := make([]byte, 0, 256)
	b = append(b, "rule="...)
	if v.rule != nil {
		b = httpcache.AppendSFItem(b, v.rule.Name)
	} else {
		b = append(b, `""`...)
	}
	b = append(b, ", key="...)
	b = httpcache.AppendSFString(b, d.key)
	if v.fwd == fwdNone {
		b = append(b, ", hit"...)
	} else {
		b = append(b, ", fwd="...)
		b = append(b, v.fwd.String()...)
	}
	if hasLifetime {
		b = append(b, ", lifetime="...)
		b = strconv.AppendInt(b, int64(lifetime/time.Second), 10)
	}
	switch {
	case d.why != "":
		b = append(b, ", stored=?0, not-stored="...)
		b = append(b, d.why...)
	case d.decided && !d.d.Store:
		b = append(b, ", stored=?0, not-stored="...)
		b = append(b, d.d.Why...)
		b = append(b, ", reason="...)
		b = httpcache.AppendSFString(b, d.d.Reason)
	case d.decided:
		b = append(b, ", stored, source="...)
		b = append(b, d.d.Source...)
		b = append(b, ", lifetime="...)
		b = strconv.AppendInt(b, int64(d.d.Lifetime/time.Second), 10)
		if d.d.NoCache {
			b = append(b, ", no-cache"...)
		}
	}
	return string(b)
}
