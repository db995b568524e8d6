// Package tierconfig owns the sidecar's configuration model: the one
// structure that a --config file, the operator's rendered CacheTier and the
// xDS push all carry. It provides defaults, validation with errors that name
// the field, compilation of path rules, and an atomic holder so a new
// config swaps in while requests are being served.
//
// The same Validate runs in the sidecar, the operator's admission webhook
// and its controller, so a bad config is refused once, early, the same way.
//
// It is also the one definition of the tier settings the CacheTier API
// shares: those types carry their kubebuilder markers (validation and the
// docs the CRD shows) and controller-gen's deep-copy functions
// (zz_generated.deepcopy.go), and internal/api/v1alpha1 names them by
// type alias.
package tierconfig

import "github.com/tiercache/tiercache/internal/store/l1"

// Config is the sidecar configuration. Its JSON form is the wire form
// (sizes and durations as strings: "512Mi", "30s").
type Config struct {
	// L1 is the in-process cache.
	L1 L1 `json:"l1"`
	// L2 is the shared Redis tier; empty Addresses means L1 only.
	L2 L2 `json:"l2,omitempty"`
	// BodyStore chooses which bodies go to files when the sidecar has a
	// body directory (--body-dir); without one it has no effect.
	BodyStore BodyStore `json:"bodyStore,omitzero"`
	// Origin is how the sidecar talks to the application it fronts.
	Origin Origin `json:"origin"`
	// Defaults apply when the origin's headers say nothing more specific.
	Defaults Defaults `json:"defaults"`
	// Rules are matched in order against the request path (and, for
	// bypass rules, its header fields and cookies); the first match
	// applies.
	Rules []Rule `json:"rules,omitempty"`
	// Coalescing collapses concurrent misses for one key into one fetch.
	Coalescing Coalescing `json:"coalescing"`
	// Purge guards the admin purge endpoint and the serving port's PURGE.
	Purge Purge `json:"purge,omitempty"`
	// RequestHeaders chooses which client request headers reach the
	// origin on fetches whose answer may be stored.
	RequestHeaders RequestHeaders `json:"requestHeaders,omitzero"`
	// AccessLog is the tier's say over the access log (accesslog.go).
	AccessLog AccessLog `json:"accessLog,omitzero"`
	// SecretVersions names the Secret contents this config goes with,
	// without their values: file name in the sidecar's secrets directory
	// ("redis-password") → "<secret>/<key>@<resourceVersion>". The operator
	// fills it so that the config's hash and version change when a Secret
	// rotates although no secret value is in the config; the sidecar reads
	// the values from its secrets directory and ignores this field. A
	// --config file leaves it empty.
	SecretVersions map[string]string `json:"secretVersions,omitempty"`
}

// RequestHeadersMode is how a tier forwards client request headers on
// cache fills.
// +kubebuilder:validation:Enum=standard;strict
type RequestHeadersMode string

// Request header modes (RequestHeaders.Mode).
const (
	// RequestHeadersStandard forwards every end-to-end request header
	// except the unkeyed forwarding headers the proxy withholds (the
	// default).
	RequestHeadersStandard RequestHeadersMode = "standard"
	// RequestHeadersStrict forwards only the allowlist and the keyed
	// headers on fetches whose answer may be stored.
	RequestHeadersStrict RequestHeadersMode = "strict"
)

// RequestHeaders chooses which client request headers reach the origin on
// fetches whose answer may be stored (cache fills). Requests that are never
// stored (bypassed paths, unsafe methods, HEAD and Range misses, GET with a
// body) always forward the client's headers as they are.
// +kubebuilder:object:generate=true
// +kubebuilder:validation:XValidation:rule="!has(self.allow) || size(self.allow) == 0 || (has(self.mode) && self.mode == 'strict')",message="allow is used only when mode is strict",fieldPath=".allow"
type RequestHeaders struct {
	// Mode is standard (default: every header except the forwarding
	// headers the sidecar always withholds, see docs/caching.md) or
	// strict (only allow, plus the headers the key holds: the rule's
	// cacheKey.headers and the names the origin's Vary lists).
	// +optional
	Mode RequestHeadersMode `json:"mode,omitempty"`
	// Allow lists the headers a strict tier forwards on fills
	// (case-insensitive). Default: Accept, Accept-Encoding,
	// Accept-Language, User-Agent. Setting it replaces the default. The
	// unkeyed forwarding headers are withheld even when listed: key on
	// them instead.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=256
	// +kubebuilder:validation:items:Pattern=`^[!#$%&'*+.^_|~0-9A-Za-z-]+$`
	// +listType=set
	Allow []string `json:"allow,omitempty"`
	// AllowUnderscoredNames lists request header names spelt with '_'
	// or '.' (X_Api_Version) that fills forward, as spelt
	// (case-insensitive). Every other such name is dropped from fills,
	// as nginx drops them by default (underscores_in_headers off): many
	// gateways read X_Tenant as X-Tenant, so an unkeyed X_Tenant could
	// decide a shared entry. A name listed here joins the cache key of
	// every rule. In either mode.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=256
	// +kubebuilder:validation:items:Pattern=`^[!#$%&'*+.^_|~0-9A-Za-z-]*[_.][!#$%&'*+.^_|~0-9A-Za-z-]*$`
	// +listType=set
	AllowUnderscoredNames []string `json:"allowUnderscoredNames,omitempty"`
}

// L1 sizes the in-process cache.
type L1 struct {
	// MaxSize bounds the memory L1 holds for entries (default 256Mi).
	MaxSize Size `json:"maxSize"`
	// MaxEntrySize is the largest stored response (headers + body);
	// larger responses stream through uncached (default 1Mi, or
	// MaxSize/Shards when that is smaller). Must not exceed
	// MaxSize/Shards.
	MaxEntrySize Size `json:"maxEntrySize"`
	// Shards is the number of bigcache shards, a power of two in
	// [1, 8192] (default 256; l1.MaxShards). It is validated, never
	// adjusted.
	Shards int `json:"shards"`
}

// CacheConfig is the configuration of the L1 store l sizes, with
// l1.LifeWindow. Validate checks l through it, so the store's limits are
// the config's.
func (l L1) CacheConfig() l1.Config {
	return l1.Config{
		MaxSize:      int64(l.MaxSize),
		MaxEntrySize: int64(l.MaxEntrySize),
		Shards:       l.Shards,
		LifeWindow:   l1.LifeWindow,
	}
}

// L2 configures Redis. Filled in by the L2 issue; defaulted and validated
// only when Addresses is not empty (Mode defaults to standalone, Timeout to
// 50ms).
type L2 struct {
	Addresses  []string `json:"addresses,omitempty"`
	Mode       string   `json:"mode,omitempty"` // L2Standalone | L2Sentinel | L2Cluster
	MasterName string   `json:"masterName,omitempty"`
	Username   string   `json:"username,omitempty"`
	Password   string   `json:"password,omitempty"`
	TLS        bool     `json:"tls,omitempty"`
	CACert     string   `json:"caCert,omitempty"` // PEM
	// KeyPrefix is only a check: the prefix is always
	// tc:<namespace>/<tier>: of the sidecar's own identity (KeyPrefix),
	// and a config naming another one is refused (CheckKeyPrefix).
	KeyPrefix string   `json:"keyPrefix,omitempty"`
	Timeout   Duration `json:"timeout,omitempty"`
	// WarmStart preloads L1 from the tier's hottest L2 entries before the
	// sidecar reports ready, so a rolling restart does not meet the origin
	// with a cold L1.
	WarmStart WarmStart `json:"warmStart,omitzero"`
	// MaxBodySize is the largest file body (see BodyStore) that is also
	// written to Redis, in 1 MiB chunks, so that other replicas serve it
	// without an origin fetch and cross-replica coalescing holds for it.
	// A larger body stays local to the replica that fetched it: its entry
	// is not written to L2 and the other replicas fetch it for
	// themselves. 0 means the default, 16Mi (Config.L2MaxBodySize); at
	// most 512Mi. Bodies stored inline in the entry (at most
	// bodyStore.threshold) are not affected.
	MaxBodySize Size `json:"maxBodySize,omitempty"`
}

// BodyStore chooses which response bodies the sidecar keeps as files in
// its body directory (--body-dir) instead of inline in the L1/L2 entry.
// The directory and its size are the sidecar's (pod-level) settings; these
// are the tier's and apply to new fills when they change. A sidecar
// without a body directory ignores them: bodies above l1.maxEntrySize
// stream through uncached, as without a body store.
//
// Zero fields mean their defaults, resolved by Config.BodyThreshold and
// Config.BodyMaxObjectSize rather than filled in by WithDefaults, so that
// a tier that does not set them pushes the same JSON as before the body
// store existed (an older sidecar refuses a field it does not know).
type BodyStore struct {
	// Threshold: bodies larger than it go to a file; smaller ones stay
	// inline in the entry. Default DefaultBodyThreshold, or
	// l1.maxEntrySize when that is smaller; at least 1Ki, at most
	// l1.maxEntrySize (above it, bodies between the two would be cached
	// nowhere) and below maxObjectSize.
	Threshold Size `json:"threshold,omitempty"`
	// MaxObjectSize is the largest body stored as a file; larger ones
	// stream through uncached. Default 1Gi, at most 1Ti.
	MaxObjectSize Size `json:"maxObjectSize,omitempty"`
}

// WarmStart bounds the preload of L1 from L2 at start-up.
type WarmStart struct {
	// Disabled turns the preload off.
	Disabled bool `json:"disabled,omitempty"`
	// MaxEntries loaded at most (default 10000).
	MaxEntries int `json:"maxEntries,omitempty"`
	// MaxBytes of entries loaded at most (default the smaller of 64Mi and
	// l1.maxSize/2).
	MaxBytes Size `json:"maxBytes,omitempty"`
	// Timeout of the whole preload; readiness waits at most this long
	// (default 5s).
	Timeout Duration `json:"timeout,omitempty"`
}

// Origin configures requests to the application. Three timeouts apply
// (docs/operations.md "Timeouts"): every origin request waits at most
// ResponseHeaderTimeout for the response headers; no request or response
// body may stand still for longer than IdleTimeout; and a fill whose
// response is being stored has Timeout to finish, after which it is served
// but not stored. Nothing bounds a healthy stream (Server-Sent Events,
// long polling, a large download, a slow upload) as a whole.
type Origin struct {
	// Timeout is the total bound of a fill whose response is being stored
	// (the waiters collapsed onto it depend on it ending): from the request
	// to the end of the body. Past it the response still reaches the client
	// (under IdleTimeout) but is not stored, and the waiters fetch for
	// themselves. Pass-through requests, uncacheable and too large
	// responses and upgraded connections are not bound by it (default 30s).
	Timeout Duration `json:"timeout"`
	// ResponseHeaderTimeout bounds the wait for the origin's response
	// headers once the request (and its body) has been sent; past it the
	// client gets 504 (default 60s, like nginx's proxy_read_timeout and
	// Varnish's first_byte_timeout).
	ResponseHeaderTimeout Duration `json:"responseHeaderTimeout,omitempty"`
	// IdleTimeout bounds how long a body may stand still: no byte read
	// from the origin's response body, or from the client's request body
	// while it is forwarded, for this long. A stalled response is cut (the
	// client sees a broken response, never a complete-looking short one);
	// a stalled upload gets 408 (default 60s, like nginx's
	// proxy_read_timeout and Varnish's between_bytes_timeout).
	IdleTimeout Duration `json:"idleTimeout,omitempty"`
	// RequestBuffer is how much of a request body is read from the
	// client before the origin is contacted, as nginx's
	// proxy_request_buffering does: a body up to this size reaches the
	// origin whole and at once, so that a slow client holds no origin
	// connection or application worker while it uploads; a larger body
	// is forwarded once this much has arrived, the rest as it comes
	// (0: the default, 1Mi; at most 64Mi). Bodies being buffered share
	// a sidecar-wide budget (proxy.RequestBufferBudget).
	RequestBuffer Size `json:"requestBuffer,omitempty"`
	// StreamRequestBodies forwards request bodies as they arrive,
	// unbuffered: for an application that reads an upload while it is
	// being sent and answers before its end (default false).
	StreamRequestBodies bool `json:"streamRequestBodies,omitempty"`
}

// Defaults are the tier-wide caching defaults.
type Defaults struct {
	// FallbackTTL is the lifetime of a heuristically cacheable response
	// without explicit freshness (Varnish default_ttl); 0 = RFC heuristics
	// only (default 0).
	FallbackTTL Duration `json:"fallbackTTL"`
	// StaleWhileRevalidate and StaleIfError apply when the origin does
	// not send them (default 0 and 0).
	StaleWhileRevalidate Duration `json:"staleWhileRevalidate"`
	StaleIfError         Duration `json:"staleIfError"`
	// NegativeTTL is the lifetime of a 404/410 without explicit freshness
	// (default 0: not stored unless the origin says so).
	NegativeTTL Duration `json:"negativeTTL"`
	// HeuristicFraction of (Date - Last-Modified) used as lifetime when
	// nothing explicit is given (default 0.1), capped at HeuristicMaxTTL
	// (default 24h). 0 counts as unset and becomes 0.1.
	HeuristicFraction float64  `json:"heuristicFraction"`
	HeuristicMaxTTL   Duration `json:"heuristicMaxTTL"`
	// AllowSetCookie stores responses that carry Set-Cookie (the
	// Set-Cookie field itself is never stored). Default false.
	AllowSetCookie bool `json:"allowSetCookie,omitempty"`
	// HitForMissTTL is how long an uncacheable answer is remembered so
	// requests for that key skip coalescing (default 2m; Varnish's
	// hit-for-miss).
	HitForMissTTL Duration `json:"hitForMissTTL"`
	// IgnoreRequestCacheControl makes the cache ignore the client's
	// Cache-Control and Pragma (as Varnish and nginx do by default) so
	// clients cannot force origin fetches. Default false (RFC behaviour).
	IgnoreRequestCacheControl bool `json:"ignoreRequestCacheControl,omitempty"`
	// TargetedCacheControl chooses the targeted cache-control fields (RFC
	// 9213) the tier obeys instead of Cache-Control, and whether clients
	// see them. Unset: CDN-Cache-Control, forwarded to clients.
	TargetedCacheControl *TargetedCacheControl `json:"targetedCacheControl,omitempty"`

	// Choices the RFCs leave to a cache (docs/caching.md "Choices"); all
	// off by default, and off the wire while off.

	// UpdateFromHead lets the 200 answer to a HEAD that was forwarded
	// because the stored GET response could not be used as it was (stale,
	// or the client asked to revalidate) update that stored response's
	// header fields, or remove it when its ETag, Last-Modified or
	// Content-Length show that it changed (RFC 9111 §4.3.5). Default
	// false: the HEAD's answer is passed through and changes nothing.
	UpdateFromHead bool `json:"updateFromHead,omitempty"`
	// ForwardClientValidators sends the client's If-None-Match and
	// If-Modified-Since to the origin on a miss when nothing is stored for
	// the request; the origin's 304 is passed through and not stored.
	// Default false: fills ask for the full response, so that it can be
	// stored, and answer the client's conditional from it.
	ForwardClientValidators bool `json:"forwardClientValidators,omitempty"`
	// StorePostResponses stores a POST's 200 answer that has explicit
	// freshness and a Content-Location naming the POST's own URI, and
	// serves it to later GETs of that URI (RFC 9110 §9.3.3). Default
	// false: the answer depends on what one client sent, and storing it
	// lets that client decide what every other client's GET receives.
	// Turn it on only for an origin trusted to mark only answers that are
	// the resource's current representation.
	StorePostResponses bool `json:"storePostResponses,omitempty"`

	// StaleIfUnreachable is how long past its freshness a stored response
	// may be served when the origin cannot be reached at all (connection
	// refused, reset or closed before a response, connect timeout), even
	// without the origin's stale-if-error (RFC 9111 §4.2.4). Responses with
	// must-revalidate, proxy-revalidate, s-maxage or no-cache never are.
	// Entries are kept (in L2) that much longer. nil means the default,
	// 10m (like nginx's inactive=10m); 0 turns it off; at most 24h. Read
	// it through StaleIfUnreachableWindow: WithDefaults leaves it unset, so
	// a tier that does not set it pushes the same JSON as before it
	// existed.
	StaleIfUnreachable *Duration `json:"staleIfUnreachable,omitempty"`
	// NormalizeAcceptLanguage compares Accept-Language by meaning when a
	// response varies on it: case, order and spacing of the language
	// ranges do not matter, their weights do ("en, de" and "De,EN" share
	// a variant; "en, de;q=0.5" and "de, en;q=0.5" do not). Default false:
	// values as received, with RFC 9111 §4.1's normalization only.
	NormalizeAcceptLanguage bool `json:"normalizeAcceptLanguage,omitempty"`
	// CacheStatus sends the Cache-Status response field (RFC 9211) beside
	// X-Cache. nil means the default, on; false turns it off (X-Cache
	// stays). Read it through CacheStatusOn.
	CacheStatus *bool `json:"cacheStatus,omitempty"`
	// IgnoreCookies names request cookies the cache removes from GET and
	// HEAD requests that a caching rule matches, before the lookup and
	// before the origin request (cookies.go): an exact name, a glob with
	// '*' ("_ga_*"), or "@analytics", the preset of common analytics and
	// advertising cookies (AnalyticsCookies). A request whose only cookies
	// are ignored is then not credentialed: rule ttl applies and
	// hit-for-miss does not kick in. A cookie a rule keys
	// (cacheKey.cookies) or a bypass condition reads (match.cookies) is
	// never removed. Default: none.
	IgnoreCookies []string `json:"ignoreCookies,omitempty"`
	// StatusTTLs are lifetimes by status for responses without explicit
	// freshness (statusttl.go): they win over NegativeTTL, FallbackTTL
	// and the heuristic, never over the origin's freshness or a rule's
	// ttl, and apply to requests with credentials only as those do. A
	// rule's statusTTLs replace these. Default: none.
	StatusTTLs []StatusTTL `json:"statusTTLs,omitempty"`
	// ContentCoding is how fills ask for content codings and how one
	// stored copy serves every client (coding.go). Default: normalize,
	// ask for br and gzip, compress text types of 1Ki and more.
	ContentCoding ContentCoding `json:"contentCoding,omitzero"`
}

// Rule applies to requests that Match selects. The first matching rule
// wins.
type Rule struct {
	// Name identifies the rule in errors and metrics: a DNS label
	// (lowercase letters, digits, '-', at most 63), unique, not "default"
	// (the name of the implicit rule for unmatched requests).
	Name string `json:"name"`
	// Match selects requests by path and, on a bypass rule, by header
	// fields and cookies.
	Match Match `json:"match"`
	// Bypass sends matching requests straight to the origin, uncached.
	Bypass bool `json:"bypass,omitempty"`
	// TTL, when set, replaces the origin's freshness lifetime for storable
	// responses (no-store, private and no-cache still win). It does not
	// apply to requests carrying Authorization or Cookie unless
	// TTLWithCredentials is set: for those the origin's own headers decide.
	TTL Duration `json:"ttl,omitempty"`
	// TTLWithCredentials applies TTL, and the tier's FallbackTTL,
	// NegativeTTL and heuristic lifetimes, also to requests that carry
	// Authorization or Cookie (default false). Set it only for paths whose
	// answer never depends on who asks (a request with Authorization still
	// needs public, s-maxage or must-revalidate from the origin).
	TTLWithCredentials bool `json:"ttlWithCredentials,omitempty"`
	// MaxTTL caps the freshness lifetime.
	MaxTTL Duration `json:"maxTTL,omitempty"`
	// StaleWhileRevalidate and StaleIfError override the tier defaults.
	StaleWhileRevalidate *Duration `json:"staleWhileRevalidate,omitempty"`
	StaleIfError         *Duration `json:"staleIfError,omitempty"`
	// CacheKey shapes the key of matching requests.
	CacheKey CacheKey `json:"cacheKey,omitempty"`
	// StatusTTLs, when set, replace the tier's defaults.statusTTLs for
	// this rule.
	StatusTTLs []StatusTTL `json:"statusTTLs,omitempty"`
}

// Match selects requests: by path (exactly one of path, pathPrefix, regex
// must be set), optionally by host, and, on a bypass rule only, by request
// header fields and cookies. Every condition given must hold.
// +kubebuilder:object:generate=true
// +kubebuilder:validation:XValidation:rule="[has(self.path), has(self.pathPrefix), has(self.regex)].filter(x, x).size() == 1",message="exactly one of path, pathPrefix, regex must be set"
type Match struct {
	// PathPrefix matches paths that start with it ("/static/").
	// +optional
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:Pattern=`^/`
	PathPrefix string `json:"pathPrefix,omitempty"`
	// Path matches one exact path.
	// +optional
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:Pattern=`^/`
	Path string `json:"path,omitempty"`
	// Regex matches paths with an RE2 regular expression, unanchored:
	// write ^ and $ to match the whole path.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Regex string `json:"regex,omitempty"`
	// Hosts, when set, limit the rule to requests for one of these hosts:
	// exact names ("shop.example.com") or "*." and a name, for any name
	// below it ("*.example.com": a.example.com, a.b.example.com, not
	// example.com). Compared case-insensitively with the host the cache
	// keys on and the origin receives (the request target's authority,
	// else Host), without its port. On any rule.
	// +optional
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MaxLength=255
	// +kubebuilder:validation:items:Pattern=`^(\*\.)?[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?)*$`
	// +listType=set
	Hosts []string `json:"hosts,omitempty"`
	// Headers are conditions on request header fields, all of which must
	// hold (with the path), e.g. bypass when X-Preview is present. Only on
	// a bypass rule: a client chooses its own headers, so they may take
	// its request past the cache, never choose how a shared entry is
	// stored or served (see docs/caching.md "Which rule applies"). A
	// request that sends the field on several lines or spelt with '_' for
	// '-' meets the condition (origins read those differently).
	// +optional
	// +kubebuilder:validation:MaxItems=8
	// +listType=map
	// +listMapKey=name
	Headers []HeaderMatch `json:"headers,omitempty"`
	// Cookies are conditions on request cookies, all of which must hold
	// (with the path and headers), e.g. bypass for clients with a session
	// cookie: {name: session, present: true}. Only on a bypass rule, as
	// headers. A request that names the cookie twice, in another case,
	// percent-encoded or beside a comma meets the condition, and so does
	// a quoted or percent-encoded value for exact and regex.
	// +optional
	// +kubebuilder:validation:MaxItems=8
	// +listType=map
	// +listMapKey=name
	Cookies []CookieMatch `json:"cookies,omitempty"`
}

// HeaderMatch is a condition on one request header field. Exactly one of
// present, absent, exact, prefix, regex must be set.
// +kubebuilder:object:generate=true
// +kubebuilder:validation:XValidation:rule="[has(self.present) && self.present, has(self.absent) && self.absent, has(self.exact), has(self.prefix), has(self.regex)].filter(x, x).size() == 1",message="exactly one of present, absent, exact, prefix, regex must be set"
type HeaderMatch struct {
	// Name of the header field, case-insensitive. Not a hop-by-hop field
	// and not Host.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	// +kubebuilder:validation:Pattern=`^[!#$%&'*+.^_|~0-9A-Za-z-]+$`
	Name string `json:"name"`
	// Present holds when the request has the field, whatever its value.
	// +optional
	Present bool `json:"present,omitempty"`
	// Absent holds when the request does not have the field.
	// +optional
	Absent bool `json:"absent,omitempty"`
	// Exact holds when the field's value is exactly this (case-sensitive).
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	Exact string `json:"exact,omitempty"`
	// Prefix holds when the field's value starts with this
	// (case-sensitive).
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	Prefix string `json:"prefix,omitempty"`
	// Regex holds when this RE2 regular expression matches the field's
	// value, unanchored: write ^ and $ to match the whole value.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	Regex string `json:"regex,omitempty"`
}

// CookieMatch is a condition on one request cookie. Exactly one of
// present, absent, exact, regex must be set.
// +kubebuilder:object:generate=true
// +kubebuilder:validation:XValidation:rule="[has(self.present) && self.present, has(self.absent) && self.absent, has(self.exact), has(self.regex)].filter(x, x).size() == 1",message="exactly one of present, absent, exact, regex must be set"
type CookieMatch struct {
	// Name of the cookie, case-sensitive.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	// +kubebuilder:validation:Pattern=`^[!#$%&'*+.^_|~0-9A-Za-z-]+$`
	Name string `json:"name"`
	// Present holds when the request sends the cookie, whatever its value
	// (an empty one too).
	// +optional
	Present bool `json:"present,omitempty"`
	// Absent holds when the request does not send the cookie.
	// +optional
	Absent bool `json:"absent,omitempty"`
	// Exact holds when the cookie's value, as received, is exactly this:
	// visible ASCII without ; , " \ % or spaces.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	Exact string `json:"exact,omitempty"`
	// Regex holds when this RE2 regular expression matches the cookie's
	// value as received, unanchored.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	Regex string `json:"regex,omitempty"`
}

// CacheKey shapes the cache key.
// +kubebuilder:object:generate=true
// +kubebuilder:validation:XValidation:rule="!(has(self.queryInclude) && size(self.queryInclude) > 0 && has(self.queryExclude) && size(self.queryExclude) > 0)",message="queryInclude and queryExclude are mutually exclusive"
type CacheKey struct {
	// QueryInclude keeps only these query parameters (a trailing * is a
	// prefix wildcard; names compare percent-decoded and
	// case-sensitively); empty keeps all.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=256
	QueryInclude []string `json:"queryInclude,omitempty"`
	// QueryExclude drops these query parameters ("utm_*").
	// +optional
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=256
	QueryExclude []string `json:"queryExclude,omitempty"`
	// SortQuery sorts parameters so their order does not split the cache.
	// +optional
	SortQuery bool `json:"sortQuery,omitempty"`
	// Headers adds these request header values to the key.
	// +optional
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MaxLength=256
	Headers []string `json:"headers,omitempty"`
	// Cookies adds these cookie values to the key (an absent cookie and
	// an empty one make different keys).
	// +optional
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MaxLength=256
	Cookies []string `json:"cookies,omitempty"`
}

// Coalescing collapses concurrent misses.
type Coalescing struct {
	// Enabled (default true).
	Enabled *bool `json:"enabled,omitempty"`
	// Timeout is how long a waiter waits for the leader's fetch before
	// fetching itself (default 10s).
	Timeout Duration `json:"timeout"`
	// ClusterWide coalesces across replicas through a Redis lease (L2
	// issue; default true when L2 is configured).
	ClusterWide *bool `json:"clusterWide,omitempty"`
}

// Purge guards POST /purge and the serving port's PURGE.
type Purge struct {
	// Token, when set, is required as "Authorization: Bearer <token>";
	// without it purges are accepted only from loopback.
	Token string `json:"token,omitempty"`
	// HTTPMethod turns on "PURGE <url>" on the serving port (Varnish's
	// habit): it purges the request's own URL, always requires Token and
	// is rate-limited with the admin purges. Off (the default), a PURGE is
	// forwarded to the origin like any other unknown method.
	HTTPMethod bool `json:"httpMethod,omitempty"`
}
