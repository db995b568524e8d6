// Package httpcache holds the rules of RFC 9111 (HTTP caching) for a shared
// cache, RFC 5861 (stale-while-revalidate, stale-if-error), RFC 9213
// (targeted cache-control fields such as CDN-Cache-Control) and the RFC
// 9110 conditional and range rules a cache needs. Everything here is a pure
// function of its arguments: no I/O, no clock (callers pass now), no
// package state. The proxy asks these functions; it never re-derives a
// caching rule itself.
//
// Parsers are lenient where leniency cannot make a response fresher or more
// shareable than the origin meant, and strict (or conservative) everywhere
// else. They never panic, whatever the bytes, and the functions on the
// cache-hit path (ParseRequestCC, Evaluate, CurrentAge, AppendVaryKey with
// an http.Header) do not allocate.
package httpcache

import (
	"time"
)

// Header is what the rules read from a header: http.Header and
// *entry.Entry both satisfy it.
type Header interface {
	Values(name string) []string
}

// maxDelta is 2^31 seconds: RFC 9111 §1.2.2 tells a cache to use it for any
// delta-seconds it cannot represent or whose arithmetic overflows. Clamping
// every duration we compute to it keeps time.Duration sums far from
// overflow (2^32 s is still ~100 times below the int64 limit).
const maxDelta = time.Duration(1<<31) * time.Second

// values is h.Values(name) that tolerates a nil Header.
func values(h Header, name string) []string {
	if h == nil {
		return nil
	}
	return h.Values(name)
}

// first returns the first field line of name, trimmed, or "".
func first(h Header, name string) string {
	vs := values(h, name)
	if len(vs) == 0 {
		return ""
	}
	return trimOWS(vs[0])
}

// clampDelta limits d to [0, 2^31 s].
func clampDelta(d time.Duration) time.Duration {
	if d < 0 {
		return 0
	}
	if d > maxDelta {
		return maxDelta
	}
	return d
}

// parseDelta parses delta-seconds (1*DIGIT). Values past 2^31 clamp to
// 2^31 seconds; anything else (sign, fraction, empty) is not ok.
func parseDelta(s string) (time.Duration, bool) {
	n, ok := parsePos(s)
	if !ok {
		return 0, false
	}
	return time.Duration(min(n, 1<<31)) * time.Second, true
}

func isOWS(c byte) bool { return c == ' ' || c == '\t' }

// trimOWS removes optional whitespace (SP, HTAB) around s.
func trimOWS(s string) string {
	for len(s) > 0 && isOWS(s[0]) {
		s = s[1:]
	}
	for len(s) > 0 && isOWS(s[len(s)-1]) {
		s = s[:len(s)-1]
	}
	return s
}

// cutElem splits a comma-separated list (RFC 9110 §5.6.1) into its first
// element, trimmed, and the rest. Quoted strings are not special: callers
// that need them (Cache-Control) have their own lexer.
func cutElem(s string) (elem, rest string) {
	for i := 0; i < len(s); i++ {
		if s[i] == ',' {
			return trimOWS(s[:i]), s[i+1:]
		}
	}
	return trimOWS(s), ""
}

// isTchar reports whether c may appear in a token (RFC 9110 §5.6.2).
func isTchar(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	switch c {
	case '!', '#', '$', '%', '&', '\'', '*', '+', '-', '.', '^', '_', '`', '|', '~':
		return true
	}
	return false
}
