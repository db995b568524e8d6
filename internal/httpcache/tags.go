package httpcache

import (
	"slices"
	"strings"
)

// Limits on the tags of one response, so a hostile or buggy origin cannot
// make an entry (and its tag sets in Redis) arbitrarily large.
const (
	maxTags   = 64
	maxTagLen = 256
)

// Tags returns the purge tags of a response: Surrogate-Key (space
// separated) and Cache-Tag (comma separated), trimmed and deduplicated.
//
// Order is first seen, Surrogate-Key before Cache-Tag. Tags longer than
// 256 bytes are dropped and at most 64 are kept. Returns nil when there
// are none.
func Tags(h Header) []string {
	var tags []string
	add := func(t string) bool {
		if t == "" || len(t) > maxTagLen || slices.Contains(tags, t) {
			return true
		}
		tags = append(tags, t)
		return len(tags) < maxTags
	}
	for _, line := range values(h, "Surrogate-Key") {
		for rest := line; rest != ""; {
			i := strings.IndexAny(rest, " \t")
			if i < 0 {
				i = len(rest)
			}
			if !add(rest[:i]) {
				return tags
			}
			rest = rest[min(i+1, len(rest)):]
		}
	}
	for _, line := range values(h, "Cache-Tag") {
		for rest := line; rest != ""; {
			var t string
			t, rest = cutElem(rest)
			if !add(t) {
				return tags
			}
		}
	}
	return tags
}
