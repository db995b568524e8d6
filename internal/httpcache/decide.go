package httpcache

import (
	"math"
	"net/http"
	"net/url"
	"slices"
	"time"
)

// Policy is the part of the tier's configuration that changes caching
// decisions. The zero Policy is pure RFC 9111 behaviour.
type Policy struct {
	// AllowSetCookie lets responses carrying Set-Cookie be stored (the
	// Set-Cookie field itself is still never stored or replayed).
	AllowSetCookie bool
	// ForceTTL, when > 0, replaces the origin's freshness lifetime for
	// storable responses (like nginx proxy_cache_valid with ignored
	// headers). no-store and private still prevent storing, and no-cache
	// still means revalidate on every use. It does not apply to requests
	// that carry Authorization or Cookie (their answer may be personal)
	// unless ForceTTLWithCredentials is set.
	ForceTTL time.Duration
	// ForceTTLWithCredentials applies ForceTTL, and the other lifetimes
	// the cache makes up (FallbackTTL, NegativeTTL, the heuristic), to
	// requests with Authorization or Cookie too (an explicit opt-in per
	// rule).
	ForceTTLWithCredentials bool
	// MaxTTL, when > 0, caps the freshness lifetime.
	MaxTTL time.Duration
	// FallbackTTL, when > 0, is the lifetime of a heuristically cacheable
	// response (RFC 9110 §15.1 list) that has no explicit freshness; it
	// takes precedence over the Last-Modified heuristic.
	FallbackTTL time.Duration
	// NegativeTTL, when > 0, is the lifetime of a 404 or 410 without
	// explicit freshness.
	NegativeTTL time.Duration
	// StatusTTLs are lifetimes by status for responses without explicit
	// freshness; they win over NegativeTTL, FallbackTTL and the
	// heuristic. A status listed here that is not cacheable by default
	// (302, 307) is stored with its lifetime (RFC 9111 §3: the cache's
	// configuration allows it).
	StatusTTLs map[int]time.Duration
	// HeuristicFraction of (Date - Last-Modified) is the heuristic
	// lifetime, capped at HeuristicMax. 0 disables the heuristic.
	HeuristicFraction float64
	HeuristicMax      time.Duration
	// Default stale windows when the origin gives none.
	StaleWhileRevalidate time.Duration
	StaleIfError         time.Duration
	// TargetedFields is the target list of RFC 9213: canonical names of
	// the targeted cache-control fields this cache obeys, most applicable
	// first (SelectResponseCC). Empty: Cache-Control and Expires alone.
	TargetedFields []string
	// StorePOST lets a 200 answer to a POST be stored for later GETs of
	// its target URI when it has explicit freshness and a
	// Content-Location naming that URI (RFC 9110 §9.3.3). Off, only GET
	// responses are stored.
	StorePOST bool
	// StaleIfUnreachable is how long past its freshness any stored
	// response may stand in for an origin that cannot be reached (RFC
	// 9111 §4.2.4), unless a directive forbids stale use. 0 turns it off.
	StaleIfUnreachable time.Duration
	// Vary chooses the normalizations of selecting header values beyond
	// those RFC 9111 §4.1 requires.
	Vary VaryOptions
}

// Exchange is one request/response pair seen by the cache.
type Exchange struct {
	Method string
	// Target is the absolute request URI; only a POST's is read (its
	// Content-Location must name it).
	Target       *url.URL
	ReqHeader    Header
	Status       int
	RespHeader   Header
	RequestTime  time.Time // when the request to the origin was sent
	ResponseTime time.Time // when the origin's response headers arrived
}

// Decision says whether and how a response may be stored (RFC 9111 §3 with
// the shared-cache rules) and with what freshness.
type Decision struct {
	Store bool
	// Reason is a short sentence saying why the response is not stored
	// (empty when Store), for logs and tests; Why is the same as a token
	// (the Why constants).
	Reason string
	Why    string
	// Source says where Lifetime came from: "forced" (a rule's ttl),
	// "explicit" (s-maxage, max-age or Expires), "negative" (the tier's
	// negativeTTL), "fallback" (fallbackTTL), "heuristic" (Last-Modified)
	// or "none" (stored for its validators only).
	Source string
	// Lifetime is the freshness lifetime (§4.2.1) after Policy; InitialAge
	// is corrected_initial_age (§4.2.3).
	Lifetime   time.Duration
	InitialAge time.Duration
	// Stale windows in effect (origin's directive, else the Policy
	// default); both 0 when MustRevalidate or NoCache.
	StaleWhileRevalidate time.Duration
	StaleIfError         time.Duration
	// StaleIfUnreachable is Policy.StaleIfUnreachable, or 0 when
	// MustRevalidate or NoCache forbid stale use.
	StaleIfUnreachable time.Duration
	// MustRevalidate: must-revalidate, proxy-revalidate or s-maxage.
	MustRevalidate bool
	// NoCache: unqualified no-cache: store, but revalidate on every use.
	NoCache bool
	// Strip lists canonical header names the stored copy must not keep
	// (private="f", no-cache="f", and Set-Cookie when allowed to store).
	Strip []string
}

// freshSource says where a freshness lifetime came from.
type freshSource uint8

const (
	sourceNone      freshSource = iota
	sourceForced                // Policy.ForceTTL
	sourceExplicit              // s-maxage, max-age, Expires (or invalid: 0)
	sourceNegative              // Policy.NegativeTTL
	sourceFallback              // Policy.FallbackTTL
	sourceHeuristic             // Last-Modified heuristic
	sourceStatus                // Policy.StatusTTLs
)

// String names the source for Decision.Source.
func (s freshSource) String() string {
	switch s {
	case sourceForced:
		return "forced"
	case sourceExplicit:
		return "explicit"
	case sourceNegative:
		return "negative"
	case sourceFallback:
		return "fallback"
	case sourceHeuristic:
		return "heuristic"
	case sourceStatus:
		return "status"
	}
	return "none"
}

// Decide applies RFC 9111 §3 for a shared cache. Only GET responses are
// stored, and POST responses when Policy.StorePOST allows it (status 200,
// explicit freshness, a Content-Location naming the target URI; RFC 9110
// §9.3.3): the stored answer is then served to later GETs of that URI. Rules, in order: no-store (request or response) and private
// (unqualified) prevent storing; a request with Authorization is stored
// only with public, s-maxage or must-revalidate (§3.5); Set-Cookie prevents
// storing unless Policy.AllowSetCookie (or no-cache/private names it);
// Vary: * is not stored; the status must be final and understood; the
// response needs explicit freshness (s-maxage > max-age > Expires - Date),
// or a heuristically cacheable status with a Policy fallback/negative TTL
// or a Last-Modified heuristic, or no-cache/validators so that it can be
// revalidated. Responses with neither freshness nor validators are not
// stored. An invalid Expires means already expired.
//
// The response directives are those SelectResponseCC picks: with a valid
// targeted field of Policy.TargetedFields (RFC 9213), that field's alone,
// and neither Cache-Control nor Expires counts for anything here; the
// request's directives, Age, Date, validators, Vary and Set-Cookie count
// as ever.
//
// Choices where the RFC leaves room (see also the package tests):
//   - status: 1xx, anything outside 200–599, 206 and 304 are never stored
//     (a 206 is stored only as a part: DecidePartial);
//     other statuses need to be cacheable by default (RFC 9110 §15.1),
//     forced by Policy.ForceTTL, or carry public, max-age, s-maxage or
//     Expires (RFC 9111 §3, last condition).
//   - must-understand with a status the cache understands lets the response
//     be stored despite its no-store (RFC 9111 §5.2.2.3); with any other
//     status it is not stored.
//   - NegativeTTL is more specific than FallbackTTL, so it wins for 404 and
//     410; FallbackTTL covers them only when NegativeTTL is 0. A status
//     lifetime (Policy.StatusTTLs) names the status, so it wins over both
//     and over the heuristic; it is made up like them (credentials).
//   - HeuristicMax <= 0 means the heuristic is not capped (beyond 2^31 s).
//   - public makes a status that is not cacheable by default
//     heuristically cacheable (RFC 9111 §5.2.2.9): the Last-Modified
//     heuristic applies to it. FallbackTTL and NegativeTTL do not: they
//     are the tier's own lifetimes for the statuses of RFC 9110 §15.1.
//   - Policy.StaleIfUnreachable applies to every stored response, whatever
//     its freshness source (a disconnected cache may serve any stale
//     response no directive forbids, RFC 9111 §4.2.4), and is 0 under
//     must-revalidate, proxy-revalidate, s-maxage and no-cache. It does
//     not make an already stale response without a validator storable.
//   - unqualified no-cache zeroes the stale windows like MustRevalidate
//     does: a no-cache response may never be served stale (§4.2.4).
//   - Set-Cookie is always in Strip when Store, whether or not the
//     response carried it, so the proxy can apply Strip to any header it
//     stores for this entry (including one merged from a 304).
//   - several different Expires values mean already expired (§4.2.1).
//   - Policy.ForceTTL is a configured override, so it yields to every
//     signal that the answer is personal or must be checked: no-store,
//     private, no-cache, and (unless ForceTTLWithCredentials) a request
//     with Authorization or Cookie, where the origin's headers decide.
//   - the answer to a request with Authorization or Cookie is stored only
//     with explicit freshness (s-maxage, max-age, Expires), unless the
//     origin marked it public or ForceTTLWithCredentials is set: no
//     FallbackTTL, NegativeTTL or heuristic lifetime, and no storing with
//     validators alone (a later anonymous request would revalidate the
//     personal copy with its Last-Modified, and an origin comparing dates
//     would confirm it).
func Decide(x Exchange, p Policy) Decision {
	if x.Method == http.MethodGet && x.Status == http.StatusPartialContent {
		// Only as a part, under DecidePartial's rules.
		return notStored(WhyStatus, "partial content (206) is not stored")
	}
	return decide(x, p)
}

// decide is Decide for every status but 206, and for a 206 that
// DecidePartial has found storable as a part.
func decide(x Exchange, p Policy) Decision {
	post := x.Method == http.MethodPost && p.StorePOST
	if x.Method != http.MethodGet && !post {
		return notStored(WhyMethod, "only GET responses are stored")
	}
	switch {
	case x.Status >= 100 && x.Status < 200:
		return notStored(WhyStatus, "an informational (1xx) response is not stored")
	case x.Status < 200 || x.Status > 599:
		return notStored(WhyStatus, "the status code is not a valid final status")
	case x.Status == http.StatusNotModified:
		return notStored(WhyStatus, "a 304 Not Modified response is not stored")
	}
	if post {
		// Checked before anything else about the response: a POST's
		// answer is a candidate for storing only as the representation
		// of its target URI.
		switch {
		case x.Status != http.StatusOK:
			return notStored(WhyStatus, "a POST response is stored only with status 200")
		case !ContentLocationIsTarget(x.Target, x.RespHeader):
			return notStored(WhyContentLocation, "a POST response is stored only with a Content-Location naming its target URI")
		}
	}
	cc := SelectResponseCC(x.RespHeader, p.TargetedFields)
	understood := understoodStatus(x.Status)
	if cc.MustUnderstand && !understood {
		return notStored(WhyMustUnderstand, "must-understand with a status code the cache does not understand prevents storing")
	}
	if ParseRequestCC(x.ReqHeader).NoStore {
		return notStored(WhyRequestNoStore, "no-store on the request prevents storing")
	}
	if cc.NoStore && !cc.MustUnderstand {
		return notStored(WhyNoStore, "no-store on the response prevents storing")
	}
	if cc.Private {
		return notStored(WhyPrivate, "private prevents storing in a shared cache")
	}
	// A malformed s-maxage is no opt-in to sharing an authenticated
	// response, hence !cc.Invalid.
	sharedOK := cc.Public || cc.MustRevalidate || (cc.SMaxAge.Valid && !cc.Invalid)
	if len(values(x.ReqHeader, "Authorization")) > 0 && !sharedOK {
		return notStored(WhyAuthorization, "a request with Authorization is stored only with public, s-maxage or must-revalidate")
	}
	cookieNamed := slices.Contains(cc.PrivateFields, "Set-Cookie") || slices.Contains(cc.NoCacheFields, "Set-Cookie")
	if len(values(x.RespHeader, "Set-Cookie")) > 0 && !p.AllowSetCookie && !cookieNamed {
		return notStored(WhySetCookie, "Set-Cookie prevents storing")
	}
	if varyStar(x.RespHeader) {
		return notStored(WhyVaryStar, "Vary: * prevents storing")
	}

	heuristic := HeuristicallyCacheable(x.Status)
	credentialed := Credentialed(x.ReqHeader)
	// Lifetimes the cache makes up (the tier's TTLs, the heuristic) apply
	// to the answer to a request with credentials only when the origin
	// called it public or the rule opts in: without explicit freshness
	// from the origin, a page answered to a Cookie may be personal.
	madeUpOK := !credentialed || p.ForceTTLWithCredentials || cc.Public
	forced := p.ForceTTL > 0 && (!credentialed || p.ForceTTLWithCredentials) &&
		(heuristic || x.Status == http.StatusFound || x.Status == http.StatusTemporaryRedirect)
	var expires []string
	if cc.Targeted == "" {
		// A targeted field replaces Expires as well (RFC 9213 §2.1).
		expires = values(x.RespHeader, "Expires")
	}
	if post {
		// RFC 9110 §9.3.3: explicit freshness from the origin, never a
		// lifetime the cache makes up (a rule's ttl included).
		if !cc.MaxAge.Valid && !cc.SMaxAge.Valid && len(expires) == 0 {
			return notStored(WhyNoFreshness, "a POST response is stored only with explicit freshness (max-age, s-maxage or Expires)")
		}
		forced = false
	}
	statusTTL, byStatus := p.StatusTTLs[x.Status]
	byStatus = byStatus && !post
	if !forced && !heuristic && !byStatus && !cc.Public && !cc.MaxAge.Valid && !cc.SMaxAge.Valid && len(expires) == 0 {
		return notStored(WhyStatus, "the status code is not cacheable by default and the response has no explicit freshness")
	}

	date, dateOK := ParseHTTPDate(first(x.RespHeader, "Date"))
	if !dateOK {
		date = x.ResponseTime
	}
	var lifetime time.Duration
	source := sourceNone
	noCache := cc.NoCache
	switch {
	case forced:
		// A forced lifetime replaces the origin's freshness, never its
		// no-cache: that still means revalidate on every use.
		lifetime, source = p.ForceTTL, sourceForced
	case cc.Invalid:
		source = sourceExplicit
	case cc.SMaxAge.Valid:
		lifetime, source = cc.SMaxAge.Value, sourceExplicit
	case cc.MaxAge.Valid:
		lifetime, source = cc.MaxAge.Value, sourceExplicit
	case len(expires) > 0:
		lifetime, source = expiresLifetime(expires, date), sourceExplicit
	case !madeUpOK:
		return notStored(WhyCredentials, "a response to a request with Cookie or Authorization is stored only with explicit freshness from the origin (or public, or a rule's ttlWithCredentials)")
	case byStatus:
		lifetime, source = statusTTL, sourceStatus
	case p.NegativeTTL > 0 && (x.Status == http.StatusNotFound || x.Status == http.StatusGone):
		lifetime, source = p.NegativeTTL, sourceNegative
	case p.FallbackTTL > 0 && heuristic:
		lifetime, source = p.FallbackTTL, sourceFallback
	case p.HeuristicFraction > 0 && (heuristic || cc.Public):
		// public makes any final status heuristically cacheable (RFC 9111
		// §4.2.2 and §5.2.2.9); the tier's made-up TTLs above stay with
		// the statuses cacheable by default.
		if lm, ok := ParseHTTPDate(first(x.RespHeader, "Last-Modified")); ok && !lm.After(date) {
			lifetime, source = heuristicLifetime(date.Sub(lm), p), sourceHeuristic
		}
	}
	if p.MaxTTL > 0 && lifetime > p.MaxTTL {
		lifetime = p.MaxTTL
	}
	lifetime = clampDelta(lifetime)

	mustRevalidate := cc.MustRevalidate || cc.ProxyRevalidate || cc.SMaxAge.Valid
	swr := staleWindow(cc.StaleWhileRevalidate, p.StaleWhileRevalidate, source)
	sie := staleWindow(cc.StaleIfError, p.StaleIfError, source)
	siu := clampDelta(p.StaleIfUnreachable)
	if mustRevalidate || noCache {
		swr, sie, siu = 0, 0, 0
	}

	validators := first(x.RespHeader, "ETag") != "" || first(x.RespHeader, "Last-Modified") != ""
	switch {
	case noCache && !validators:
		return notStored(WhyNoCacheNoValidator, "no-cache without a validator could never be reused")
	case source == sourceNone && !validators:
		return notStored(WhyNoFreshness, "no freshness information and no validator")
	case lifetime == 0 && !validators && swr == 0 && sie == 0:
		return notStored(WhyAlreadyStale, "the response is already stale and has no validator")
	}

	strip := make([]string, 0, len(cc.PrivateFields)+len(cc.NoCacheFields)+1)
	for _, f := range slices.Concat(cc.PrivateFields, cc.NoCacheFields, []string{"Set-Cookie"}) {
		if !slices.Contains(strip, f) {
			strip = append(strip, f)
		}
	}
	return Decision{
		Store:                true,
		Source:               source.String(),
		Lifetime:             lifetime,
		InitialAge:           initialAge(x, date, dateOK),
		StaleWhileRevalidate: swr,
		StaleIfError:         sie,
		StaleIfUnreachable:   siu,
		MustRevalidate:       mustRevalidate,
		NoCache:              noCache,
		Strip:                strip,
	}
}

// Credentialed reports whether a request carries Authorization or Cookie,
// so that its answer may be personal.
func Credentialed(req Header) bool {
	return len(values(req, "Authorization")) > 0 || len(values(req, "Cookie")) > 0
}

func notStored(why, reason string) Decision { return Decision{Why: why, Reason: reason} }

// Why values: a Decision's short reason for not storing, for debug
// output, logs and metrics (a token; Reason is the sentence).
const (
	WhyMethod             = "method"
	WhyStatus             = "status"
	WhyContentLocation    = "content-location"
	WhyMustUnderstand     = "must-understand"
	WhyRequestNoStore     = "request-no-store"
	WhyNoStore            = "no-store"
	WhyPrivate            = "private"
	WhyAuthorization      = "authorization"
	WhySetCookie          = "set-cookie"
	WhyVaryStar           = "vary-star"
	WhyCredentials        = "credentials"
	WhyNoCacheNoValidator = "no-cache-no-validator"
	WhyNoFreshness        = "no-freshness"
	WhyRange              = "range"        // a 206 to anything but one byte range
	WhyPart               = "invalid-part" // a 206 whose Content-Range does not match its body
	WhyAlreadyStale       = "already-stale"
)

// expiresLifetime is Expires - Date (§4.2.1). An invalid Expires, or
// several that disagree, means already expired (§5.3, §4.2.1).
func expiresLifetime(expires []string, date time.Time) time.Duration {
	for _, e := range expires[1:] {
		if trimOWS(e) != trimOWS(expires[0]) {
			return 0
		}
	}
	exp, ok := ParseHTTPDate(expires[0])
	if !ok {
		return 0
	}
	return clampDelta(exp.Sub(date))
}

// heuristicLifetime is HeuristicFraction × (Date − Last-Modified) capped at
// HeuristicMax (when set) and 2^31 s. The float work guards NaN and ±Inf
// from a hostile or mistaken configuration.
func heuristicLifetime(sinceModified time.Duration, p Policy) time.Duration {
	f := float64(sinceModified) * p.HeuristicFraction
	var d time.Duration
	switch {
	case math.IsNaN(f) || f <= 0:
		d = 0
	case f >= float64(maxDelta):
		d = maxDelta
	default:
		d = time.Duration(f)
	}
	if p.HeuristicMax > 0 && d > p.HeuristicMax {
		d = p.HeuristicMax
	}
	return d
}

// staleWindow is the origin's window when it sent one, else the Policy
// default as long as the response has some freshness source.
func staleWindow(origin Delta, def time.Duration, source freshSource) time.Duration {
	if origin.Valid {
		return clampDelta(origin.Value)
	}
	if source == sourceNone {
		return 0
	}
	return clampDelta(def)
}

// CorrectedInitialAge is corrected_initial_age (RFC 9111 §4.2.3) of the
// response of x, stored or not: what Decide puts in Decision.InitialAge.
func CorrectedInitialAge(x Exchange) time.Duration {
	date, ok := ParseHTTPDate(first(x.RespHeader, "Date"))
	return initialAge(x, date, ok)
}

// initialAge is corrected_initial_age of RFC 9111 §4.2.3. A missing Date
// gives no apparent age; a zero or later RequestTime gives no response
// delay; every term is clamped to [0, 2^31 s] so clock skew and absurd
// inputs never make it negative or overflow.
func initialAge(x Exchange, date time.Time, dateOK bool) time.Duration {
	var apparent time.Duration
	if dateOK {
		apparent = clampDelta(x.ResponseTime.Sub(date))
	}
	var delay time.Duration
	if !x.RequestTime.IsZero() {
		delay = clampDelta(x.ResponseTime.Sub(x.RequestTime))
	}
	corrected := AgeValue(x.RespHeader) + delay
	return clampDelta(max(apparent, corrected))
}

// varyStar reports whether Vary lists "*".
func varyStar(h Header) bool {
	for _, line := range values(h, "Vary") {
		for rest := line; rest != ""; {
			var e string
			e, rest = cutElem(rest)
			if e == "*" {
				return true
			}
		}
	}
	return false
}

// understoodStatus reports whether the cache knows the caching
// requirements of status (for must-understand): the final statuses of
// RFC 9110 §15 plus the common RFC 6585 and RFC 7725 ones, none of which
// asks anything special of a cache beyond what Decide already does.
func understoodStatus(status int) bool {
	switch status {
	case 200, 201, 202, 203, 204, 205, 206,
		300, 301, 302, 303, 304, 305, 307, 308,
		400, 401, 402, 403, 404, 405, 406, 407, 408, 409, 410, 411, 412, 413, 414, 415, 416, 417, 421, 422, 426,
		428, 429, 431, 451,
		500, 501, 502, 503, 504, 505, 511:
		return true
	}
	return false
}

// HeuristicallyCacheable reports whether status is cacheable by default
// (RFC 9110 §15.1): 200, 203, 204, 206, 300, 301, 308, 404, 405, 410,
// 414, 501.
func HeuristicallyCacheable(status int) bool {
	switch status {
	case 200, 203, 204, 206, 300, 301, 308, 404, 405, 410, 414, 501:
		return true
	}
	return false
}
