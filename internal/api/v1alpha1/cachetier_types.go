package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tiercache/tiercache/internal/tierconfig"
)

// Duration is a Go duration string, which may also count days, weeks and
// years as Varnish and nginx do: "30s", "5m", "1h30m", "250ms", "1d",
// "7d", "2w", "1y" (d = 24h, w = 7d, y = 365d) or "0".
// +kubebuilder:validation:XValidation:rule="self.matches('^(0|(([0-9]+([.][0-9]*)?|[.][0-9]+)(ns|us|µs|ms|s|m|h|d|w|y))+)$')",message="must be a duration such as 30s, 1h30m or 7d (units ns, us, ms, s, m, h, d = 24h, w = 7d, y = 365d), or 0"
// +kubebuilder:validation:MaxLength=32
type Duration string

// CacheTier declares how the Tiercache sidecars of the pods that name it
// (annotation tiercache.io/tier) cache: L1 size, the shared Redis L2, the
// caching defaults, path rules, request coalescing and purge access, and
// the shape of the injected sidecar container.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=ct,categories=tiercache
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="L2",type=string,JSONPath=`.status.l2Mode`
// +kubebuilder:printcolumn:name="Pods",type=integer,JSONPath=`.status.injectedPods`
// +kubebuilder:printcolumn:name="Current",type=integer,JSONPath=`.status.sidecars.current`
// +kubebuilder:printcolumn:name="Behind",type=integer,JSONPath=`.status.sidecars.behind`
// +kubebuilder:printcolumn:name="Rejected",type=integer,JSONPath=`.status.sidecars.rejected`
// +kubebuilder:printcolumn:name="Connected",type=integer,JSONPath=`.status.connectedSidecars`,priority=1
// +kubebuilder:printcolumn:name="Config",type=string,JSONPath=`.status.configHash`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="self.metadata.name.size() <= 63",message="metadata.name: must be at most 63 characters (it becomes the tiercache.io/tier label value of injected pods)"
type CacheTier struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is the desired caching behaviour.
	// +optional
	Spec CacheTierSpec `json:"spec,omitempty"`
	// Status is what the operator observed and rendered.
	// +optional
	Status CacheTierStatus `json:"status,omitempty"`
}

// CacheTierList is a list of CacheTiers.
//
// +kubebuilder:object:root=true
type CacheTierList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []CacheTier `json:"items"`
}

// CacheTierSpec is the desired caching behaviour of a tier. Every field is
// optional: an empty spec is an L1-only cache with RFC 9111 behaviour.
type CacheTierSpec struct {
	// L1 sizes the in-process cache of each sidecar.
	// +optional
	L1 L1Spec `json:"l1,omitempty"`
	// L2 is the Redis shared by every sidecar of the tier. Unset means L1
	// only: purges and invalidations then reach the tier's other pods
	// through the operator's control plane (its invalidation relay), or,
	// when the operator runs without one, only the pod that receives them.
	// +optional
	L2 *L2Spec `json:"l2,omitempty"`
	// BodyStore keeps response bodies above a threshold as files on a
	// volume of each pod, served with sendfile, instead of in L1's memory;
	// bodies larger than l1.maxEntrySize are then cached too. Setting size
	// turns it on: the operator adds an emptyDir volume of that size to
	// the tier's pods. Unset: bodies above l1.maxEntrySize stream through
	// uncached.
	// +optional
	BodyStore *BodyStoreSpec `json:"bodyStore,omitempty"`
	// Origin is how the sidecar talks to the application it fronts.
	// +optional
	Origin OriginSpec `json:"origin,omitempty"`
	// Defaults apply when the origin's headers say nothing more specific.
	// +optional
	Defaults DefaultsSpec `json:"defaults,omitempty"`
	// Rules are matched in order against the request path (and, for bypass
	// rules, its header fields and cookies); the first match applies.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=64
	Rules []Rule `json:"rules,omitempty"`
	// Coalescing collapses concurrent misses for one key into one origin
	// fetch.
	// +optional
	Coalescing CoalescingSpec `json:"coalescing,omitempty"`
	// Purge guards the sidecars' admin POST /purge endpoint and their
	// serving port's PURGE method (off by default).
	// +optional
	Purge PurgeSpec `json:"purge,omitempty"`
	// RequestHeaders chooses which client request headers reach the
	// origin on fetches whose answer may be stored.
	// +optional
	RequestHeaders RequestHeadersSpec `json:"requestHeaders,omitempty"`
	// AccessLog is the tier's say over the sidecars' access log (one JSON
	// line per request on the sidecar's stdout). Each field left unset
	// takes the sidecar's --access-log* flag (default: on, every request).
	// +optional
	AccessLog AccessLogSpec `json:"accessLog,omitempty"`
	// Sidecar shapes the container injected into the tier's pods.
	// +optional
	Sidecar SidecarSpec `json:"sidecar,omitempty"`
}

// L1Spec sizes the in-process cache.
type L1Spec struct {
	// MaxSize bounds the memory L1 holds for entries (default 256Mi, at
	// least 1Mi). The injected container's memory is derived from it
	// unless spec.sidecar.resources is set.
	// +optional
	MaxSize *resource.Quantity `json:"maxSize,omitempty"`
	// MaxEntrySize is the largest stored response, headers and body;
	// larger responses stream through uncached (default 1Mi, or
	// maxSize/shards when smaller; at most maxSize/shards).
	// +optional
	MaxEntrySize *resource.Quantity `json:"maxEntrySize,omitempty"`
	// Shards is the number of L1 shards, a power of two (default 256).
	// +optional
	// +kubebuilder:validation:Enum=1;2;4;8;16;32;64;128;256;512;1024;2048;4096;8192
	Shards int32 `json:"shards,omitempty"`
}

// L2Mode is how the sidecars reach Redis.
// +kubebuilder:validation:Enum=standalone;sentinel;cluster
type L2Mode string

// L2 modes.
const (
	L2Standalone L2Mode = "standalone"
	L2Sentinel   L2Mode = "sentinel"
	L2Cluster    L2Mode = "cluster"
)

// L2Spec configures the shared Redis tier.
// +kubebuilder:validation:XValidation:rule="self.mode != 'sentinel' || (has(self.masterName) && size(self.masterName) > 0)",message="masterName is required when mode is sentinel",fieldPath=".masterName"
// +kubebuilder:validation:XValidation:rule="self.mode == 'sentinel' || !has(self.masterName) || size(self.masterName) == 0",message="masterName is allowed only when mode is sentinel",fieldPath=".masterName"
// +kubebuilder:validation:XValidation:rule="self.mode != 'standalone' || self.addresses.size() == 1",message="standalone mode takes exactly one address",fieldPath=".addresses"
type L2Spec struct {
	// Addresses are host:port pairs: the server (standalone), the
	// sentinels (sentinel) or seed nodes (cluster).
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MaxLength=261
	// +kubebuilder:validation:items:Pattern=`^[^\s]+:[0-9]{1,5}$`
	Addresses []string `json:"addresses"`
	// Mode is standalone, sentinel or cluster.
	// +optional
	// +kubebuilder:default=standalone
	Mode L2Mode `json:"mode,omitempty"`
	// MasterName is the Sentinel master set; required with mode sentinel.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	MasterName string `json:"masterName,omitempty"`
	// Username for Redis ACLs (Redis 6+).
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Username string `json:"username,omitempty"`
	// PasswordSecretRef names a key of a Secret in the tier's namespace
	// that holds the Redis password. The Secret must carry the label
	// tiercache.io/allow-reference: "true". It reaches the sidecars as a
	// file of a projected volume, never through the control plane; a
	// rotated password is applied live.
	// +optional
	PasswordSecretRef *corev1.SecretKeySelector `json:"passwordSecretRef,omitempty"`
	// TLS connects to Redis over TLS.
	// +optional
	TLS *L2TLS `json:"tls,omitempty"`
	// Timeout bounds each Redis call; a slow Redis is skipped, never
	// waited for (default 50ms).
	// +optional
	Timeout Duration `json:"timeout,omitempty"`
	// WarmStart preloads L1 from the tier's hottest L2 entries before a
	// sidecar reports ready.
	// +optional
	WarmStart *WarmStart `json:"warmStart,omitempty"`
	// MaxBodySize is the largest body kept as a file (spec.bodyStore) that
	// is also written to Redis, in 1 MiB chunks, so that the other
	// sidecars serve it without an origin fetch and fetch it only once
	// between them. A larger body stays on the sidecar that fetched it:
	// every other sidecar fetches it from its own origin once (default
	// 16Mi, at most 512Mi).
	// +optional
	MaxBodySize *resource.Quantity `json:"maxBodySize,omitempty"`
}

// BodyStoreMedium is where the body volume lives.
// +kubebuilder:validation:Enum=Disk;Memory
type BodyStoreMedium string

// Body store media.
const (
	// BodyStoreDisk: the node's disk (an emptyDir without a medium).
	BodyStoreDisk BodyStoreMedium = "Disk"
	// BodyStoreMemory: tmpfs (an emptyDir with medium Memory).
	BodyStoreMemory BodyStoreMedium = "Memory"
)

// BodyStoreSpec sizes the body store of each sidecar and chooses which
// bodies go there. A body is cached as a file when it is larger than
// threshold and at most maxObjectSize; the least recently used files are
// evicted to keep the total within size. Files survive a restart of the
// sidecar container (they are checked before reuse), not a new pod.
type BodyStoreSpec struct {
	// Size is the budget of each sidecar's body files, and turns the body
	// store on: the operator adds an emptyDir volume
	// "tiercache-bodies" with a sizeLimit of size + 1/8 (room for files
	// being written) mounted at /var/cache/tiercache/bodies. At least
	// 64Mi, at most 1Ti. A change applies to pods created after it.
	// +optional
	Size *resource.Quantity `json:"size,omitempty"`
	// Medium is Disk (default: the node's ephemeral storage, with the
	// page cache in front of it) or Memory (tmpfs: its pages count
	// against the sidecar container's memory, so a derived memory
	// request and limit grow by size, and a memory limit set in
	// spec.sidecar.resources must leave size + 64Mi room). A change
	// applies to pods created after it.
	// +optional
	// +kubebuilder:default=Disk
	Medium BodyStoreMedium `json:"medium,omitempty"`
	// Threshold: bodies larger than it are kept as files, smaller ones in
	// memory with their entry (default 64Ki, or l1.maxEntrySize when
	// smaller; at least 1Ki, at most l1.maxEntrySize). Applies live to new
	// fills.
	// +optional
	Threshold *resource.Quantity `json:"threshold,omitempty"`
	// MaxObjectSize is the largest body kept as a file; larger ones stream
	// through uncached (default 1Gi, at most 1Ti and at most size).
	// Applies live to new fills.
	// +optional
	MaxObjectSize *resource.Quantity `json:"maxObjectSize,omitempty"`
}

// L2TLS configures TLS to Redis.
type L2TLS struct {
	// Enabled turns TLS on.
	Enabled bool `json:"enabled"`
	// CASecretRef names a Secret key holding the PEM CA bundle that signs
	// the Redis server certificate; unset means the system roots. The
	// Secret must carry the label tiercache.io/allow-reference: "true".
	// +optional
	CASecretRef *corev1.SecretKeySelector `json:"caSecretRef,omitempty"`
}

// WarmStart bounds the start-up preload of L1 from L2.
type WarmStart struct {
	// Disabled turns the preload off.
	// +optional
	Disabled bool `json:"disabled,omitempty"`
	// MaxEntries loaded at most (default 10000).
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=1000000
	MaxEntries int32 `json:"maxEntries,omitempty"`
	// MaxBytes loaded at most (default the smaller of 64Mi and
	// l1.maxSize/2).
	// +optional
	MaxBytes *resource.Quantity `json:"maxBytes,omitempty"`
	// Timeout of the whole preload; readiness waits at most this long
	// (default 5s, at most 1m).
	// +optional
	Timeout Duration `json:"timeout,omitempty"`
}

// OriginSpec configures requests to the application. Nothing bounds a
// healthy stream (Server-Sent Events, long polling, a large download, a
// slow upload) as a whole: only the response-header and idle timeouts
// apply to it.
type OriginSpec struct {
	// Timeout is the total bound of a fill whose response is being stored,
	// from the request to the end of the body (the requests waiting for the
	// same key depend on it). Past it the response still reaches the
	// client but is not stored. Pass-through requests, uncacheable or too
	// large responses and WebSockets are not bound by it (default 30s, at
	// most 10m).
	// +optional
	Timeout Duration `json:"timeout,omitempty"`
	// ResponseHeaderTimeout bounds the wait for the origin's response
	// headers once the request has been sent; past it the client gets 504
	// (default 60s, at most 10m).
	// +optional
	ResponseHeaderTimeout Duration `json:"responseHeaderTimeout,omitempty"`
	// IdleTimeout bounds how long a body may stand still: no byte from the
	// origin's response body, or from the client's request body while it
	// is forwarded. A stalled response is cut; a stalled upload gets 408
	// (default 60s, at most 1h).
	// +optional
	IdleTimeout Duration `json:"idleTimeout,omitempty"`
	// RequestBuffer is how much of a request body the sidecar reads from
	// the client before it contacts the origin, as nginx's
	// proxy_request_buffering: a body up to this size reaches the origin
	// whole and at once, with Content-Length, so a slow upload holds no
	// origin connection nor application worker (a stalled one gets 408
	// and the origin never hears of it). A body announced or grown larger
	// is forwarded as it arrives. The bodies being read share a
	// sidecar-wide 16Mi (default 1Mi, at most 64Mi).
	// +optional
	RequestBuffer *resource.Quantity `json:"requestBuffer,omitempty"`
	// StreamRequestBodies forwards every request body as it arrives,
	// unbuffered, whatever requestBuffer says: for an application that
	// reads an upload while it is being sent and answers before its end
	// (a progress-reporting upload endpoint, a full-duplex stream over
	// HTTP/1.1). Default false.
	// +optional
	StreamRequestBodies bool `json:"streamRequestBodies,omitempty"`
}

// DefaultsSpec are the tier-wide caching defaults.
type DefaultsSpec struct {
	// FallbackTTL is the lifetime of a cacheable response that carries no
	// explicit freshness (Varnish's default_ttl). Unset: RFC 9111
	// heuristics only.
	// +optional
	FallbackTTL Duration `json:"fallbackTTL,omitempty"`
	// StaleWhileRevalidate serves a stale entry this long past its
	// lifetime while one background fetch refreshes it, when the origin
	// does not say (RFC 5861).
	// +optional
	StaleWhileRevalidate Duration `json:"staleWhileRevalidate,omitempty"`
	// StaleIfError serves a stale entry this long past its lifetime when
	// the origin fails, when the origin does not say (RFC 5861).
	// +optional
	StaleIfError Duration `json:"staleIfError,omitempty"`
	// NegativeTTL is the lifetime of a 404 or 410 without explicit
	// freshness. Unset: not stored unless the origin says so.
	// +optional
	NegativeTTL Duration `json:"negativeTTL,omitempty"`
	// HeuristicPercent of (Date - Last-Modified) is the lifetime of a
	// response without explicit freshness (default 10, RFC 9111 §4.2.2),
	// capped at heuristicMaxTTL.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	HeuristicPercent int32 `json:"heuristicPercent,omitempty"`
	// HeuristicMaxTTL caps the heuristic lifetime (default 24h).
	// +optional
	HeuristicMaxTTL Duration `json:"heuristicMaxTTL,omitempty"`
	// HitForMissTTL is how long an uncacheable answer is remembered so
	// requests for that key skip coalescing (default 2m; Varnish's
	// hit-for-miss).
	// +optional
	HitForMissTTL Duration `json:"hitForMissTTL,omitempty"`
	// AllowSetCookie stores responses that carry Set-Cookie (the
	// Set-Cookie field itself is never stored).
	// +optional
	AllowSetCookie bool `json:"allowSetCookie,omitempty"`
	// IgnoreRequestCacheControl ignores the client's Cache-Control and
	// Pragma, as Varnish and nginx do, so clients cannot force origin
	// fetches.
	// +optional
	IgnoreRequestCacheControl bool `json:"ignoreRequestCacheControl,omitempty"`
	// TargetedCacheControl chooses the targeted cache-control fields (RFC
	// 9213, such as CDN-Cache-Control) the sidecars obey instead of
	// Cache-Control and Expires, and whether clients see them. Unset:
	// CDN-Cache-Control, forwarded to clients.
	// +optional
	TargetedCacheControl *TargetedCacheControlSpec `json:"targetedCacheControl,omitempty"`

	// Choices the RFCs leave to a cache (docs/caching.md "Choices"), all
	// off by default.

	// UpdateFromHead lets the 200 answer to a HEAD that the sidecar
	// forwarded because its stored GET response could not be used as it
	// was (stale, or the client asked to revalidate) update that stored
	// response's header fields, or remove it when its ETag, Last-Modified
	// or Content-Length show that it changed (RFC 9111 §4.3.5). Default
	// false: the HEAD's answer is passed through and changes nothing.
	// +optional
	UpdateFromHead bool `json:"updateFromHead,omitempty"`
	// ForwardClientValidators sends the client's If-None-Match and
	// If-Modified-Since to the origin on a miss when nothing is stored for
	// the request; the origin's 304 is passed through and not stored.
	// Default false: the sidecar asks for the full response, stores it and
	// answers the client's conditional itself.
	// +optional
	ForwardClientValidators bool `json:"forwardClientValidators,omitempty"`
	// StorePostResponses stores a POST's 200 answer that has explicit
	// freshness and a Content-Location naming the POST's own URI, and
	// serves it to later GETs of that URI (RFC 9110 §9.3.3). Default
	// false: the answer depends on what one client sent, and storing it
	// lets that client decide what every other client's GET receives.
	// Turn it on only for an origin trusted to mark only answers that are
	// the resource's current representation.
	// +optional
	StorePostResponses bool `json:"storePostResponses,omitempty"`

	// StaleIfUnreachable is how long past its freshness a stored response
	// may be served when the origin cannot be reached at all (connection
	// refused, reset or closed before a response, connect timeout), even
	// without the origin's stale-if-error (RFC 9111 §4.2.4). Never for
	// responses with must-revalidate, proxy-revalidate, s-maxage or
	// no-cache. Stored responses are kept that much longer. Default 10m;
	// "0" turns it off; at most 24h.
	// +optional
	StaleIfUnreachable *Duration `json:"staleIfUnreachable,omitempty"`
	// NormalizeAcceptLanguage compares Accept-Language by meaning when a
	// response varies on it: case, order and spacing of the language
	// ranges do not matter, their q-values do (default false: values as
	// received).
	// +optional
	NormalizeAcceptLanguage bool `json:"normalizeAcceptLanguage,omitempty"`
	// CacheStatus sends the Cache-Status response field (RFC 9211:
	// "tiercache; hit; ttl=42; detail=<rule>") beside X-Cache. Default
	// true; false turns it off (X-Cache stays).
	// +optional
	CacheStatus *bool `json:"cacheStatus,omitempty"`
	// IgnoreCookies names request cookies the sidecars remove from GET and
	// HEAD requests that a caching rule matches, before the lookup and the
	// origin request, so that they neither split nor defeat caching: exact
	// names, globs with '*' ("_ga_*"), or "@analytics" (the common
	// analytics and advertising cookies, docs/caching.md). A cookie a rule
	// keys or a bypass condition reads is never removed. Never list a
	// cookie the application reads: the origin does not receive it.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=256
	// +kubebuilder:validation:items:Pattern=`^(@analytics|[!#$%&'*+.^_|~0-9A-Za-z-]+)$`
	// +listType=set
	IgnoreCookies []string `json:"ignoreCookies,omitempty"`
	// StatusTTLs are lifetimes by status code for responses without
	// explicit freshness (nginx's proxy_cache_valid 301 302 1h). They win
	// over negativeTTL, fallbackTTL and the heuristic, never over the
	// origin's max-age, s-maxage or Expires or a rule's ttl.
	// +optional
	// +kubebuilder:validation:MaxItems=16
	StatusTTLs []StatusTTLSpec `json:"statusTTLs,omitempty"`
	// ContentCoding is how the sidecars ask the origin for content codings
	// on requests a caching rule matches, and serve one stored copy to
	// every client (docs/caching.md, content codings).
	// +optional
	ContentCoding ContentCodingSpec `json:"contentCoding,omitzero"`
}

// ContentCodingSpec normalizes Accept-Encoding: fills ask the origin with
// originAccepts whatever the client sent, one copy per URL is stored, and
// each client gets it as stored when it accepts its coding, decoded when
// it does not.
type ContentCodingSpec struct {
	// Normalize replaces the Accept-Encoding of every fill with
	// originAccepts and takes Accept-Encoding out of the variant key.
	// Default true.
	// +optional
	Normalize *bool `json:"normalize,omitempty"`
	// OriginAccepts are the codings fills ask the origin for, most
	// preferred first: br, gzip, zstd (identity is always acceptable).
	// Default [br, gzip]; an empty list asks for identity.
	// +optional
	// +kubebuilder:validation:MaxItems=3
	// +kubebuilder:validation:items:Enum=br;gzip;zstd
	// +listType=set
	OriginAccepts []string `json:"originAccepts,omitzero"`
	// Compress stores identity responses gzip-compressed once.
	// +optional
	Compress ContentCompressSpec `json:"compress,omitzero"`
}

// ContentCompressSpec is store-time compression: an identity response of
// one of types, at least minSize long, kept inline, is stored
// gzip-compressed once and its hits are served compressed.
type ContentCompressSpec struct {
	// Enabled: default true (with normalize).
	// +optional
	Enabled *bool `json:"enabled,omitempty"`
	// MinSize is the least body length compressed. Default 1Ki.
	// +optional
	MinSize *resource.Quantity `json:"minSize,omitempty"`
	// Types are media types ("text/html", or "text/*" for a whole type).
	// Default: text/*, application/json, application/javascript,
	// application/xml, application/xhtml+xml, application/rss+xml,
	// application/atom+xml, application/ld+json,
	// application/manifest+json, application/wasm, image/svg+xml,
	// font/ttf, font/otf.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=128
	// +kubebuilder:validation:items:Pattern=`^[!#$%&'*+.^_|~0-9A-Za-z-]+/[!#$%&'*+.^_|~0-9A-Za-z-]+$`
	// +listType=set
	Types []string `json:"types,omitzero"`
}

// StatusTTLSpec is the lifetime of responses with one of statuses.
type StatusTTLSpec struct {
	// Statuses are status codes: 200, 203, 204, 300, 301, 302, 307, 308,
	// 404, 405, 410, 414 or 501, each once in its list.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=13
	// +kubebuilder:validation:items:Enum=200;203;204;300;301;302;307;308;404;405;410;414;501
	// +listType=set
	Statuses []int32 `json:"statuses"`
	// TTL is their lifetime (> 0).
	TTL Duration `json:"ttl"`
}

// TargetedCacheControlSpec is the tier's target list of RFC 9213: the
// sidecar config's own type.
type TargetedCacheControlSpec = tierconfig.TargetedCacheControl

// Rule applies to requests its match selects.
// +kubebuilder:validation:XValidation:rule="(has(self.bypass) && self.bypass) || ((!has(self.match.headers) || size(self.match.headers) == 0) && (!has(self.match.cookies) || size(self.match.cookies) == 0))",message="match.headers and match.cookies are allowed only on a bypass rule: a client chooses its own headers and cookies, so they may take its request past the cache but never choose how a shared entry is stored or served",fieldPath=".match"
type Rule struct {
	// Name identifies the rule in errors and metrics: a DNS label, unique
	// in the tier, not "default".
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +kubebuilder:validation:XValidation:rule="self != 'default'",message="\"default\" is reserved for requests no rule matches"
	Name string `json:"name"`
	// Match selects requests by path and, on a bypass rule, by request
	// header fields and cookies.
	Match Match `json:"match"`
	// Bypass sends matching requests straight to the origin, uncached.
	// +optional
	Bypass bool `json:"bypass,omitempty"`
	// TTL replaces the origin's freshness lifetime for storable responses
	// (no-store, private and no-cache still win). It does not apply to
	// requests that carry Authorization or Cookie unless
	// ttlWithCredentials is set: for those the origin's headers decide.
	// +optional
	TTL Duration `json:"ttl,omitempty"`
	// TTLWithCredentials applies ttl, and the tier's fallbackTTL,
	// negativeTTL and heuristic lifetimes, also to requests that carry
	// Authorization or Cookie. Set it only for paths whose answer never
	// depends on who asks.
	// +optional
	TTLWithCredentials bool `json:"ttlWithCredentials,omitempty"`
	// MaxTTL caps the freshness lifetime.
	// +optional
	MaxTTL Duration `json:"maxTTL,omitempty"`
	// StaleWhileRevalidate overrides the tier default for this rule.
	// +optional
	StaleWhileRevalidate *Duration `json:"staleWhileRevalidate,omitempty"`
	// StaleIfError overrides the tier default for this rule.
	// +optional
	StaleIfError *Duration `json:"staleIfError,omitempty"`
	// CacheKey shapes the cache key of matching requests.
	// +optional
	CacheKey CacheKey `json:"cacheKey,omitempty"`
	// StatusTTLs, when set, replace the tier's defaults.statusTTLs for
	// this rule.
	// +optional
	// +kubebuilder:validation:MaxItems=16
	StatusTTLs []StatusTTLSpec `json:"statusTTLs,omitempty"`
}

// RequestHeadersMode is how a tier forwards client request headers on
// cache fills.
type RequestHeadersMode = tierconfig.RequestHeadersMode

// Request header modes.
const (
	RequestHeadersStandard = tierconfig.RequestHeadersStandard
	RequestHeadersStrict   = tierconfig.RequestHeadersStrict
)

// RequestHeadersSpec chooses which client request headers reach the origin
// on fetches whose answer may be stored: the sidecar config's own type.
type RequestHeadersSpec = tierconfig.RequestHeaders

// AccessLogSpec chooses what the sidecars' access log writes: the
// sidecar config's own type.
type AccessLogSpec = tierconfig.AccessLog

// The leaf types of a rule are the sidecar config's own: one definition
// (tierconfig) carries the fields, their validation markers and their
// docs, for the CRD and the sidecar alike.
type (
	// Match selects requests by path, header fields and cookies.
	Match = tierconfig.Match
	// HeaderMatch is a condition on one request header field.
	HeaderMatch = tierconfig.HeaderMatch
	// CookieMatch is a condition on one request cookie.
	CookieMatch = tierconfig.CookieMatch
	// CacheKey shapes the cache key.
	CacheKey = tierconfig.CacheKey
)

// CoalescingSpec collapses concurrent misses.
type CoalescingSpec struct {
	// Enabled (default true).
	// +optional
	Enabled *bool `json:"enabled,omitempty"`
	// Timeout is how long a waiter waits for the leader's fetch before it
	// fetches itself (default 10s, at most 5m).
	// +optional
	Timeout Duration `json:"timeout,omitempty"`
	// ClusterWide coalesces across all sidecars of the tier through a
	// Redis lease (default true when L2 is set).
	// +optional
	ClusterWide *bool `json:"clusterWide,omitempty"`
}

// PurgeSpec guards POST /purge on the sidecars' admin port and PURGE on
// their serving port.
type PurgeSpec struct {
	// TokenSecretRef names a Secret key holding the purge token (at least
	// 16 characters, no whitespace), required as "Authorization: Bearer
	// <token>". The Secret must carry the label
	// tiercache.io/allow-reference: "true". Unset: the token is the
	// purge-token key of the Secret <tier>-tiercache that the operator
	// generates.
	// +optional
	TokenSecretRef *corev1.SecretKeySelector `json:"tokenSecretRef,omitempty"`
	// HTTPMethod turns on "PURGE <url>" on the sidecars' serving port, as
	// Varnish users send it: it purges the URL of the request's Host and
	// target (every variant, in L1 and L2; every replica, through L2's
	// invalidation channel or, without spec.l2, the operator's
	// invalidation relay: see the PurgesReachEveryPod condition), marks it stale
	// instead with the header "Tiercache-Soft-Purge: 1", requires the
	// purge token as "Authorization: Bearer <token>" and shares the admin
	// purges' rate limit. Off (the default): a PURGE goes to the
	// application like any other method the sidecar does not cache.
	// +optional
	HTTPMethod bool `json:"httpMethod,omitempty"`
}

// SidecarSpec shapes the injected sidecar container.
// +kubebuilder:validation:XValidation:rule="!has(self.port) || !has(self.adminPort) || self.port != self.adminPort",message="port and adminPort must differ"
type SidecarSpec struct {
	// Image overrides the operator's sidecar image. It must be the
	// operator's own image or one the operator allows
	// (--allowed-sidecar-images, chart value sidecar.allowedImages);
	// another is refused at admission.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	Image string `json:"image,omitempty"`
	// ImagePullPolicy of the sidecar container.
	// +optional
	ImagePullPolicy corev1.PullPolicy `json:"imagePullPolicy,omitempty"`
	// Resources of the sidecar container. Unset: memory request and limit
	// of l1.maxSize×1.25 + 128Mi, cpu request 100m, no cpu limit.
	// +optional
	Resources *corev1.ResourceRequirements `json:"resources,omitempty"`
	// Port the sidecar serves on; it takes over the fronted port's name
	// (default 15180).
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	Port int32 `json:"port,omitempty"`
	// AdminPort serves /metrics, /healthz, /readyz and /purge (default
	// 15190).
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	AdminPort int32 `json:"adminPort,omitempty"`
	// FrontHTTP2 lets the sidecar take over a port declared HTTP/2 or
	// gRPC: by its container port name (grpc, h2c, http2, or one of them
	// followed by "-", as Istio reads names), or by the appProtocol (grpc,
	// h2c, http2, kubernetes.io/h2c) of a Service that targets it. The
	// sidecar passes HTTP/2 with prior knowledge (h2c, gRPC) through to the
	// app uncached and caches the port's HTTP/1.1 traffic. Unset or false:
	// a pod whose port a Service declares so is admitted without the
	// sidecar (with an admission warning), a tiercache.io/port naming such
	// a port is refused, and a Service that declares a fronted port so
	// later turns ServicesRouted False.
	// +optional
	FrontHTTP2 bool `json:"frontHTTP2,omitempty"`
}

// Condition types and reasons of CacheTier status.
const (
	// ConditionValid says whether the spec (with its Secrets) renders to a
	// config the sidecar accepts.
	ConditionValid = "Valid"
	// ConditionReady says whether the tier's pods run the rendered config:
	// True when every injected pod has a sidecar connected to the control
	// plane, every connected sidecar applied (ACKed) the version of
	// status.configHash, and no pod must be restarted to use the Secrets
	// the tier names; or when the tier has no injected pod (nothing to
	// wait for, as a Deployment scaled to 0 is Available).
	ConditionReady = "Ready"
	// ConditionServicesRouted says whether the Services that select the
	// tier's pods reach the sidecar: False when one targets the
	// application's port by number (the sidecar takes over the port's
	// name), so its traffic goes around the cache.
	ConditionServicesRouted = "ServicesRouted"
	// ConditionPurgesReachEveryPod says whether a purge or an invalidation
	// that one pod receives reaches every pod of the tier: True with L2
	// (through its invalidation channel), with the operator's control
	// plane (its invalidation relay, for a tier without L2) or with at
	// most one pod; False for an L1-only tier with several pods when the
	// operator runs without a control plane, where a PURGE through a
	// Service, an application's POST /purge and an unsafe method's
	// invalidation reach only the pod that receives them (kubectl
	// tiercache purge still reaches every pod).
	ConditionPurgesReachEveryPod = "PurgesReachEveryPod"
	// ConditionSidecarImagesMatch says whether every injected pod runs the
	// tier's sidecar image (spec.sidecar.image, else the operator's
	// --sidecar-image): False names how many run another one (admitted
	// before an upgrade or an image change; they change when re-created).
	ConditionSidecarImagesMatch = "SidecarImagesMatch"

	ReasonRendered      = "Rendered"
	ReasonInvalidSpec   = "InvalidSpec"
	ReasonSecretMissing = "SecretMissing"
	// ReasonSecretConflict: a Secret named like the tier's generated one
	// exists but was not generated for it; the operator leaves it alone.
	ReasonSecretConflict = "SecretConflict"
	// ReasonPublished: the config is published, and the operator has no
	// control plane whose sidecars it could count (they run the config
	// placed in their pod spec at admission).
	ReasonPublished     = "Published"
	ReasonNotValid      = "NotValid"
	ReasonPublishFailed = "PublishFailed"
	// ReasonConfigRejected is the Event reason of a sidecar's NACK, and
	// Ready's while connected sidecars refuse the current version.
	ReasonConfigRejected = "ConfigRejected"
	// ReasonApplied: every injected pod's sidecar is connected and
	// applied the current version.
	ReasonApplied = "Applied"
	// ReasonNoPods: the config is published and no pod is injected for
	// the tier (nothing to wait for; a pod admitted later gets the
	// current version).
	ReasonNoPods = "NoPods"
	// ReasonSidecarsNotConnected: fewer sidecars are connected to the
	// control plane than the tier has injected pods (starting, or cut off
	// from the control plane).
	ReasonSidecarsNotConnected = "SidecarsNotConnected"
	// ReasonSidecarsBehind: some connected sidecars still run an older
	// version (not yet sent, being applied, or stuck), none refused it.
	ReasonSidecarsBehind = "SidecarsBehind"
	// ReasonRestartRequired: some pods were admitted with other Secret
	// references than the tier names now (spec.purge.tokenSecretRef,
	// spec.l2.passwordSecretRef, spec.l2.tls.caSecretRef): a pod's
	// volumes are fixed at admission, so they keep the old Secrets until
	// restarted.
	ReasonRestartRequired = "RestartRequired"
	// ReasonThroughSidecar: no Service that selects the tier's pods
	// targets their application port by number.
	ReasonThroughSidecar = "ThroughSidecar"
	// ReasonServiceTargetsAppPort: a Service targets the application's
	// port by number, around the sidecar; also the reason of the Warning
	// Event on the Service.
	ReasonServiceTargetsAppPort = "ServiceTargetsAppPort"
	// ReasonServiceDeclaresHTTP2: a Service declares the fronted port
	// HTTP/2 or gRPC by its appProtocol while the tier does not set
	// spec.sidecar.frontHTTP2; also the reason of the Warning Event on the
	// Service.
	ReasonServiceDeclaresHTTP2 = "ServiceDeclaresHTTP2"
	// ReasonThroughL2: purges and invalidations reach every pod through
	// L2's invalidation channel.
	ReasonThroughL2 = "ThroughL2"
	// ReasonThroughRelay: an L1-only tier whose purges and invalidations
	// reach every pod through the operator's invalidation relay.
	ReasonThroughRelay = "ThroughRelay"
	// ReasonAtMostOnePod: an L1-only tier with at most one pod.
	ReasonAtMostOnePod = "AtMostOnePod"
	// ReasonL1OnlyReplicas: an L1-only tier with several pods, and no
	// control plane to relay its purges.
	ReasonL1OnlyReplicas = "L1OnlyReplicas"
	// ReasonTierImage: every injected pod runs the tier's sidecar image.
	ReasonTierImage = "TierImage"
	// ReasonOtherImages: some injected pods run another sidecar image.
	ReasonOtherImages = "OtherImages"
)

// CacheTierStatus is what the operator observed and rendered.
type CacheTierStatus struct {
	// ObservedGeneration is the spec generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Conditions: Valid, Ready, ServicesRouted, PurgesReachEveryPod and
	// SidecarImagesMatch.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// ConfigHash is the sha256 of the rendered sidecar config, Secrets
	// included; it changes when a referenced Secret does.
	// +optional
	ConfigHash string `json:"configHash,omitempty"`
	// L2Mode is the L2 mode in effect, or "none" for L1 only.
	// +optional
	L2Mode string `json:"l2Mode,omitempty"`
	// InjectedPods counts the pods of the namespace injected for this
	// tier.
	// +optional
	// +kubebuilder:default=0
	InjectedPods int32 `json:"injectedPods"`
	// ConnectedSidecars counts the sidecars connected to the control plane
	// of any operator replica for this tier (sidecars.total).
	// +optional
	// +kubebuilder:default=0
	ConnectedSidecars int32 `json:"connectedSidecars"`
	// NACKs counts the pushed configs that sidecars refused (their own
	// validation failed), summed over the running operator replicas, each
	// since it started: it drops when a replica that heard some stops.
	// +optional
	NACKs int64 `json:"nacks,omitempty"`
	// LastNACK is the most recent refusal: version, sidecar and reason.
	// +optional
	LastNACK string `json:"lastNACK,omitempty"`

	// Sidecars counts the tier's sidecars connected to the control plane
	// of any operator replica, by the config they run against configHash
	// (kubectl get ct: Current, Behind, Rejected).
	// +optional
	Sidecars *SidecarCounts `json:"sidecars,omitempty"`
}

// SidecarCounts are a tier's connected sidecars by the config they run,
// summed over the reports of every operator replica. Current + Behind +
// Rejected = Total.
type SidecarCounts struct {
	// Total counts the connected sidecars (connectedSidecars).
	Total int32 `json:"total"`
	// Current counts those that applied the version of configHash.
	Current int32 `json:"current"`
	// Behind counts those that run an older version and did not refuse
	// this one: not sent yet, being applied, or stuck.
	Behind int32 `json:"behind"`
	// Rejected counts those whose latest answer refused the version of
	// configHash (a NACK); they keep running their last good config.
	Rejected int32 `json:"rejected"`
	// Versions counts the connected sidecars by the version they run
	// (its first 12 hex digits; "unknown" when a sidecar named none), most
	// common first, at most 8 (the rest are left out).
	// +optional
	// +kubebuilder:validation:MaxItems=8
	// +listType=atomic
	Versions []VersionCount `json:"versions,omitempty"`
	// Replicas counts the operator replicas whose reports were added up.
	Replicas int32 `json:"replicas"`
}

// VersionCount is the number of sidecars that run one config version.
type VersionCount struct {
	// Version is the first 12 hex digits of the config version, or
	// "unknown".
	// +kubebuilder:validation:MaxLength=12
	Version string `json:"version"`
	// Sidecars running it.
	Sidecars int32 `json:"sidecars"`
}
