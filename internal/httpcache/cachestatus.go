package httpcache

import (
	"strconv"
	"sync/atomic"
	"time"
)

// CacheStatus is one cache's member of the Cache-Status response field
// (RFC 9211): what the cache did with the request.
type CacheStatus struct {
	// Hit: served from the cache without asking the next hop (§2.1).
	Hit bool
	// Fwd is why the request went to the next hop (§2.2): "bypass",
	// "method", "uri-miss", "vary-miss", "miss", "request", "stale" or
	// "partial"; "" with Hit. Neither Hit nor Fwd: the member has no
	// parameter saying what happened.
	Fwd string
	// FwdStatus is the next hop's status code when it differs from the
	// status sent (§2.3); 0 omits it.
	FwdStatus int
	// TTL is the response's remaining freshness lifetime, negative when
	// stale (§2.4), sent when HasTTL.
	TTL    time.Duration
	HasTTL bool
	// Stored: the cache stored the next hop's response (§2.5).
	Stored bool
	// Collapsed: the request was collapsed with others (§2.6).
	Collapsed bool
	// Key is the cache key (§2.7); "" omits it.
	Key string
	// Detail is implementation-specific information (§2.8); "" omits it.
	Detail string
}

// AppendCacheStatus appends the member of the cache named name to dst, in
// the syntax of a Structured Fields list member (RFC 8941 §3.1): the name
// as a token when it is one, else as a string, then its parameters. Fwd
// must be a token; Key and Detail are sent as tokens when they are ones
// (Detail) or as strings (Key, always), with bytes a string cannot carry
// percent-encoded.
func AppendCacheStatus(dst []byte, name string, s CacheStatus) []byte {
	dst = appendBareItem(dst, name)
	switch {
	case s.Hit:
		dst = append(dst, "; hit"...)
	case s.Fwd != "":
		dst = append(dst, "; fwd="...)
		dst = append(dst, s.Fwd...)
		if s.FwdStatus > 0 {
			dst = append(dst, "; fwd-status="...)
			dst = strconv.AppendInt(dst, int64(s.FwdStatus), 10)
		}
	}
	if s.HasTTL {
		dst = append(dst, "; ttl="...)
		dst = strconv.AppendInt(dst, ttlSeconds(s.TTL), 10)
	}
	if s.Stored {
		dst = append(dst, "; stored"...)
	}
	if s.Collapsed {
		dst = append(dst, "; collapsed"...)
	}
	if s.Key != "" {
		dst = append(dst, "; key="...)
		dst = appendSFString(dst, s.Key)
	}
	if s.Detail != "" {
		dst = append(dst, "; detail="...)
		dst = appendBareItem(dst, s.Detail)
	}
	return dst
}

// ttlSeconds rounds d down to whole seconds (a response 0.5 s past its
// freshness is stale: -1), within the range of an sf-integer.
func ttlSeconds(d time.Duration) int64 {
	s := int64(d / time.Second)
	if d < 0 && d%time.Second != 0 {
		s--
	}
	const limit = 999_999_999_999_999
	return max(-limit, min(s, limit))
}

// AppendSFItem appends v as an sf-token when it is one, else as an
// sf-string (AppendSFString).
func AppendSFItem(dst []byte, v string) []byte { return appendBareItem(dst, v) }

// AppendSFString appends v as an sf-string, bytes a string cannot hold
// percent-encoded (as a Cache-Status key).
func AppendSFString(dst []byte, v string) []byte { return appendSFString(dst, v) }

// appendBareItem appends v as an sf-token when it is one, else as an
// sf-string.
func appendBareItem(dst []byte, v string) []byte {
	if isSFToken(v) {
		return append(dst, v...)
	}
	return appendSFString(dst, v)
}

// isSFToken reports whether v is an sf-token (RFC 8941 §3.3.4): ALPHA or
// "*" first, then tchar, ":" or "/".
func isSFToken(v string) bool {
	if v == "" {
		return false
	}
	if c := v[0]; !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '*') {
		return false
	}
	for i := 1; i < len(v); i++ {
		if c := v[i]; !isTchar(c) && c != ':' && c != '/' {
			return false
		}
	}
	return true
}

// appendSFString appends v as an sf-string (RFC 8941 §3.3.3): '"' and
// '\' escaped, and the bytes a string cannot hold (controls, DEL,
// non-ASCII) and '%' percent-encoded, so that the value stays readable and
// can be decoded back.
func appendSFString(dst []byte, v string) []byte {
	const hex = "0123456789ABCDEF"
	dst = append(dst, '"')
	for i := 0; i < len(v); i++ {
		switch c := v[i]; {
		case c == '"' || c == '\\':
			dst = append(dst, '\\', c)
		case c < 0x20 || c >= 0x7f || c == '%':
			dst = append(dst, '%', hex[c>>4], hex[c&0xf])
		default:
			dst = append(dst, c)
		}
	}
	return append(dst, '"')
}

// HitMembers builds the Cache-Status members of hits ("name; hit;
// ttl=N; detail=D") for one cache name and detail, and keeps the last one
// built for each remaining second in a small ring: the hits of a hot
// response within one second share one string instead of each building
// its own. Safe for concurrent use.
type HitMembers struct {
	name, detail string
	ring         [hitRing]atomic.Pointer[hitMember]
}

// hitMember is the member of hits with secs seconds of freshness left.
type hitMember struct {
	secs int64
	s    string
}

const hitRing = 64

// NewHitMembers returns the hit members of the cache name for detail.
func NewHitMembers(name, detail string) *HitMembers {
	return &HitMembers{name: name, detail: detail}
}

// Member is the member of a hit with remaining freshness ttl.
func (m *HitMembers) Member(ttl time.Duration) string {
	secs := ttlSeconds(ttl)
	slot := &m.ring[uint64(secs)%hitRing]
	if h := slot.Load(); h != nil && h.secs == secs {
		return h.s
	}
	var buf [128]byte
	h := &hitMember{secs: secs, s: string(AppendCacheStatus(buf[:0], m.name, CacheStatus{Hit: true, TTL: ttl, HasTTL: true, Detail: m.detail}))}
	slot.Store(h)
	return h.s
}
