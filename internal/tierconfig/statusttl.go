package tierconfig

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// StatusTTL is the lifetime of responses with one of Statuses that carry
// no explicit freshness (defaults.statusTTLs, rules[].statusTTLs): nginx's
// proxy_cache_valid 301 302 1h.
type StatusTTL struct {
	// Statuses are the status codes this lifetime is for.
	Statuses []int32 `json:"statuses"`
	// TTL is their lifetime, > 0.
	TTL Duration `json:"ttl"`
}

// StatusTTLStatuses are the statuses a status lifetime may name: those
// cacheable by default (RFC 9110 §15.1; 206 is stored only as a part of
// its representation, under its own rules), and 302 and 307, which a
// cache may store when its configuration gives the freshness (RFC 9111
// §3, "a cache extension that allows it"; nginx's proxy_cache_valid
// default list is 200 301 302), as a rule's ttl already does.
var StatusTTLStatuses = []int{200, 203, 204, 300, 301, 302, 307, 308, 404, 405, 410, 414, 501}

// statusLifetimes is a list of StatusTTLs as the caching policy reads it.
func statusLifetimes(list []StatusTTL) map[int]time.Duration {
	if len(list) == 0 {
		return nil
	}
	m := make(map[int]time.Duration)
	for _, s := range list {
		for _, code := range s.Statuses {
			m[int(code)] = s.TTL.Std()
		}
	}
	return m
}

// validateStatusTTLs checks a statusTTLs list at field: each entry with
// statuses a status lifetime may name, each status once in the list, and a
// lifetime > 0.
func validateStatusTTLs(p *problems, field string, list []StatusTTL) {
	if len(list) > maxStatusTTLs {
		p.add(field, "must have at most %d entries (got %d)", maxStatusTTLs, len(list))
	}
	seen := map[int32]int{}
	for i, s := range list {
		at := fmt.Sprintf("%s[%d]", field, i)
		if len(s.Statuses) == 0 {
			p.add(at+".statuses", "must name at least one status")
		}
		for j, code := range s.Statuses {
			if !slices.Contains(StatusTTLStatuses, int(code)) {
				p.add(fmt.Sprintf("%s.statuses[%d]", at, j), "must be one of %s: the statuses a shared cache may store with a lifetime its configuration gives (got %d)", statusList(), code)
				continue
			}
			if k, ok := seen[code]; ok {
				p.add(fmt.Sprintf("%s.statuses[%d]", at, j), "%d is also in %s[%d]: give each status one lifetime", code, field, k)
				continue
			}
			seen[code] = i
		}
		if s.TTL <= 0 {
			p.add(at+".ttl", "must be > 0 (got %s)", s.TTL)
		}
		checkDuration(p, at+".ttl", s.TTL)
	}
}

func statusList() string {
	s := make([]string, len(StatusTTLStatuses))
	for i, c := range StatusTTLStatuses {
		s[i] = strconv.Itoa(c)
	}
	return strings.Join(s, ", ")
}

// maxStatusTTLs bounds a statusTTLs list (the CRD's MaxItems).
const maxStatusTTLs = 16
