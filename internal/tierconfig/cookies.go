package tierconfig

import (
	"net/http"
	"strconv"
	"strings"
)

// Ignored cookies (defaults.ignoreCookies) are removed from a cacheable
// request before anything reads it: the rule's key, the Vary values, the
// credentials check and the request to the origin all see the request
// without them. The cache then decides on exactly what the origin sees: a
// removed cookie never reaches the origin on a request whose answer may be
// stored, so the origin cannot personalise on it.

// AnalyticsPreset is the ignoreCookies entry that stands for
// AnalyticsCookies. '@' cannot start a cookie name (RFC 6265 §4.1.1: a
// token), so it names no cookie.
const AnalyticsPreset = "@analytics"

// AnalyticsCookies are the cookies "@analytics" ignores: cookies that a
// vendor's script in the browser sets and reads to count or attribute
// visits, and that the site's own server does not need to build a page.
// Each is from the vendor's own cookie documentation; the list is
// docs/caching.md's. Consent cookies (OptanonConsent, CookieConsent, ...)
// are not in it: a page may differ with them (the banner).
var AnalyticsCookies = []string{
	// Google Analytics (analytics.js, gtag.js: _ga, _ga_<container>,
	// _gid, _gat and _gat_<property>; urchin.js: __utma .. __utmz) and
	// Google Ads conversion linker (_gcl_au, _gcl_aw, _gcl_dc, ...;
	// _gac_<property>).
	"_ga", "_ga_*", "_gid", "_gat", "_gat_*", "__utm*", "_gcl_*", "_gac_*",
	// Meta pixel.
	"_fbp", "_fbc",
	// Microsoft Advertising UET (_uetsid, _uetvid) and Clarity.
	"_uet*", "_clck", "_clsk",
	// Hotjar (_hjSessionUser_<site>, _hjSession_<site>, _hjid, ...).
	"_hj*",
	// Matomo (_pk_id.<site>.<hash>, _pk_ses..., _pk_ref...).
	"_pk_*",
	// Mixpanel (mp_<token>_mixpanel).
	"mp_*",
	// HubSpot analytics.
	"__hstc", "__hssc", "__hssrc", "hubspotutk",
	// TikTok, Pinterest, Snap pixels; Yandex Metrica.
	"_ttp", "_pin_unauth", "_scid", "_ym_*",
}

// cookieIgnore is a compiled ignoreCookies: which cookie names a
// cacheable request loses. The zero value ignores nothing.
type cookieIgnore struct {
	patterns []string // names and '*' globs, the preset expanded
	// exempt are the names a rule keys or a bypass condition reads:
	// never removed, compared case-insensitively (some origins read
	// names so).
	exempt []string
}

func compileCookieIgnore(c Config) cookieIgnore {
	if len(c.Defaults.IgnoreCookies) == 0 {
		return cookieIgnore{}
	}
	var ci cookieIgnore
	for _, e := range c.Defaults.IgnoreCookies {
		if e == AnalyticsPreset {
			ci.patterns = append(ci.patterns, AnalyticsCookies...)
		} else {
			ci.patterns = append(ci.patterns, e)
		}
	}
	for _, r := range c.Rules {
		ci.exempt = append(ci.exempt, r.CacheKey.Cookies...)
		for _, m := range r.Match.Cookies {
			ci.exempt = append(ci.exempt, m.Name)
		}
	}
	return ci
}

// ignores reports whether the cookie called name is removed.
func (ci *cookieIgnore) ignores(name string) bool {
	for _, e := range ci.exempt {
		if strings.EqualFold(e, name) {
			return false
		}
	}
	for _, p := range ci.patterns {
		if globMatch(p, name) {
			return true
		}
	}
	return false
}

// StripIgnoredCookies removes the tier's ignored cookies from h's Cookie
// field lines and reports whether it removed any. When it removes one, the
// field is rebuilt as one line of the kept cookie-pairs ("a=1; b=2", RFC
// 6265 §5.4), empty pairs dropped, or deleted when none is kept; when it
// removes none, h is left as it was. Every line is read (a client may send
// several), pairs are split at ';' with surrounding white space trimmed,
// and a pair is removed as a whole whatever its value holds (a quoted
// value, a ','): what is not sent cannot be misread.
func (c *Compiled) StripIgnoredCookies(h http.Header) bool {
	ci := &c.ignoreCookies
	lines := h["Cookie"]
	if len(ci.patterns) == 0 || len(lines) == 0 {
		return false
	}
	removed := false
	var kept []string
	for _, line := range lines {
		for rest := line; rest != ""; {
			var pair string
			pair, rest, _ = strings.Cut(rest, ";")
			pair = strings.Trim(pair, " \t")
			if pair == "" {
				continue
			}
			name, _, _ := strings.Cut(pair, "=")
			if ci.ignores(strings.Trim(name, " \t")) {
				removed = true
				continue
			}
			kept = append(kept, pair)
		}
	}
	if !removed {
		return false
	}
	if len(kept) == 0 {
		delete(h, "Cookie")
	} else {
		h["Cookie"] = []string{strings.Join(kept, "; ")}
	}
	return true
}

// globMatch reports whether name matches pattern, in which '*' stands for
// any run of bytes (none too) and every other byte for itself.
func globMatch(pattern, name string) bool {
	star, at := -1, 0 // last '*' seen in pattern, and where name resumed after it
	pi, ni := 0, 0
	for ni < len(name) {
		switch {
		case pi < len(pattern) && pattern[pi] == '*':
			star, at = pi, ni
			pi++
		case pi < len(pattern) && pattern[pi] == name[ni]:
			pi++
			ni++
		case star >= 0:
			at++
			pi, ni = star+1, at
		default:
			return false
		}
	}
	for pi < len(pattern) && pattern[pi] == '*' {
		pi++
	}
	return pi == len(pattern)
}

// validateIgnoreCookies checks defaults.ignoreCookies: each entry a cookie
// name, a glob or the preset, and no exact name that a rule keys or a
// bypass condition reads (the config says both "ignore" and "use" of one
// cookie; which one wins is not what the operator may think). Globs and
// the preset may cover such a name: it is exempt (cookieIgnore.exempt).
func (c Config) validateIgnoreCookies(p *problems) {
	const field = "defaults.ignoreCookies"
	if n := len(c.Defaults.IgnoreCookies); n > maxIgnoreCookies {
		p.add(field, "must have at most %d entries (got %d)", maxIgnoreCookies, n)
	}
	for i, e := range c.Defaults.IgnoreCookies {
		at := field + "[" + strconv.Itoa(i) + "]"
		if e == AnalyticsPreset {
			continue
		}
		if len(e) > maxCondNameLen || !isToken(e) {
			p.add(at, "not a cookie name, a glob with '*' or %q (got %q)", AnalyticsPreset, e)
			continue
		}
		if strings.Contains(e, "*") {
			continue
		}
		for ri, r := range c.Rules {
			for ki, k := range r.CacheKey.Cookies {
				if strings.EqualFold(k, e) {
					p.add(at, "%q is also rules[%d].cacheKey.cookies[%d] (%s): a cookie cannot be both ignored and keyed; remove it from one of them", e, ri, ki, r.Name)
				}
			}
			for mi, m := range r.Match.Cookies {
				if strings.EqualFold(m.Name, e) {
					p.add(at, "%q is also rules[%d].match.cookies[%d].name (%s): a cookie a bypass condition reads is never ignored; remove it from one of them", e, ri, mi, r.Name)
				}
			}
		}
	}
}

// maxIgnoreCookies bounds defaults.ignoreCookies (the CRD's MaxItems).
const maxIgnoreCookies = 64
