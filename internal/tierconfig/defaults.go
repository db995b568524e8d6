package tierconfig

import (
	"maps"
	"time"
)

// The built-in values: every default of the config model is here, read
// by Default() and WithDefaults or, for fields whose unset value stays
// unset, by the accessor that resolves it (BodyThreshold,
// StaleIfUnreachableWindow, TargetedFields, ...). The CRD's own defaults
// (its +kubebuilder:default markers and the "(default ...)" of its field
// docs) cannot refer to them: internal/operator/render's
// TestCRDDefaultsAreTheConfigDefaults checks that they agree. Validation
// limits live in validate.go (L1's in internal/store/l1).
const (
	defaultL1MaxSize        = 256 * Mi
	defaultL1MaxEntrySize   = 1 * Mi
	defaultL1Shards         = 256
	defaultOriginTimeout    = Duration(30 * time.Second)
	defaultOriginHeaderWait = Duration(60 * time.Second)
	defaultOriginIdle       = Duration(60 * time.Second)
	// DefaultRequestBuffer is origin.requestBuffer's default: JSON and
	// form posts, and most uploads from a phone, arrive whole.
	DefaultRequestBuffer     = 1 * Mi
	defaultHeuristicFraction = 0.1
	defaultHeuristicMaxTTL   = Duration(24 * time.Hour)
	defaultHitForMissTTL     = Duration(2 * time.Minute)
	defaultCoalesceTimeout   = Duration(10 * time.Second)
	defaultL2Timeout         = Duration(50 * time.Millisecond)
	defaultL2Mode            = L2Standalone
	defaultBodyMaxObject     = 1 * Gi
	defaultL2MaxBodySize     = 16 * Mi
	defaultWarmMaxEntries    = 10000
	defaultWarmMaxBytes      = 64 * Mi // or half of l1.maxSize when smaller
	defaultWarmTimeout       = Duration(5 * time.Second)
)

// DefaultStaleIfUnreachable is defaults.staleIfUnreachable when a tier
// does not set it.
const DefaultStaleIfUnreachable = 10 * time.Minute

// DefaultBodyThreshold is the body size above which a sidecar with a body
// directory stores a body as a file rather than inline in the entry, when
// the tier sets no bodyStore.threshold. Chosen by measurement (the 100 KiB
// and 1 MiB hits of make bench, docs/benchmarks.md); it is the one place
// to retune.
const DefaultBodyThreshold = 64 * Ki

// L2 modes.
const (
	L2Standalone = "standalone"
	L2Sentinel   = "sentinel"
	L2Cluster    = "cluster"
)

// Default returns the built-in config: the one the sidecar runs with when
// nothing else is given. It is complete and valid: L1 only, no rules, no
// purge token, RFC 9111 behaviour with a 10% Last-Modified heuristic.
func Default() Config {
	return Config{}.WithDefaults()
}

// WithDefaults returns c with every unset field set to its default. A zero
// value counts as unset, except where zero is itself the default and means
// something (the fallback, negative and stale TTLs). So a partial config
// gets defaults for everything it did not say, and WithDefaults is
// idempotent. L2 defaults are filled only when L2 has addresses.
//
// l1.maxEntrySize defaults to 1Mi, or to l1.maxSize/l1.shards when that is
// smaller, so that setting only a small l1.maxSize yields a valid config.
//
// Note that heuristicFraction 0 is "unset" and becomes 0.1; to weaken the
// heuristic set a small fraction or a short heuristicMaxTTL.
//
// c is not modified; the result shares no slices or pointers with c.
func (c Config) WithDefaults() Config {
	c = c.clone()
	if c.L1.MaxSize == 0 {
		c.L1.MaxSize = defaultL1MaxSize
	}
	if c.L1.Shards == 0 {
		c.L1.Shards = defaultL1Shards
	}
	if c.L1.MaxEntrySize == 0 {
		c.L1.MaxEntrySize = defaultL1MaxEntrySize
		if c.L1.Shards > 0 {
			if limit := c.L1.MaxSize / Size(c.L1.Shards); limit > 0 && limit < c.L1.MaxEntrySize {
				c.L1.MaxEntrySize = limit
			}
		}
	}
	if len(c.L2.Addresses) > 0 {
		if c.L2.Mode == "" {
			c.L2.Mode = defaultL2Mode
		}
		if c.L2.Timeout == 0 {
			c.L2.Timeout = defaultL2Timeout
		}
		w := &c.L2.WarmStart
		if w.MaxEntries == 0 {
			w.MaxEntries = defaultWarmMaxEntries
		}
		if w.MaxBytes == 0 {
			w.MaxBytes = min(defaultWarmMaxBytes, c.L1.MaxSize/2)
		}
		if w.Timeout == 0 {
			w.Timeout = defaultWarmTimeout
		}
	}
	if c.Origin.Timeout == 0 {
		c.Origin.Timeout = defaultOriginTimeout
	}
	if c.Origin.ResponseHeaderTimeout == 0 {
		c.Origin.ResponseHeaderTimeout = defaultOriginHeaderWait
	}
	if c.Origin.IdleTimeout == 0 {
		c.Origin.IdleTimeout = defaultOriginIdle
	}
	if c.Defaults.HeuristicFraction == 0 {
		c.Defaults.HeuristicFraction = defaultHeuristicFraction
	}
	if c.Defaults.HeuristicMaxTTL == 0 {
		c.Defaults.HeuristicMaxTTL = defaultHeuristicMaxTTL
	}
	if c.Defaults.HitForMissTTL == 0 {
		c.Defaults.HitForMissTTL = defaultHitForMissTTL
	}
	if c.Coalescing.Enabled == nil {
		c.Coalescing.Enabled = ptr(true)
	}
	if c.Coalescing.Timeout == 0 {
		c.Coalescing.Timeout = defaultCoalesceTimeout
	}
	if c.RequestHeaders.Mode == RequestHeadersStrict && len(c.RequestHeaders.Allow) == 0 {
		c.RequestHeaders.Allow = DefaultStrictAllow()
	}
	return c
}

// DefaultStrictAllow is the allowlist of a strict tier that sets none:
// content negotiation and the client's software, which origins commonly
// vary on and which a cache can key on (Vary) safely.
func DefaultStrictAllow() []string {
	return []string{"Accept", "Accept-Encoding", "Accept-Language", "User-Agent"}
}

// CacheStatusOn reports whether responses carry Cache-Status (unset means
// on).
func (d Defaults) CacheStatusOn() bool { return d.CacheStatus == nil || *d.CacheStatus }

// StaleIfUnreachableWindow is defaults.staleIfUnreachable, or
// DefaultStaleIfUnreachable when it is not set.
func (d Defaults) StaleIfUnreachableWindow() time.Duration {
	if d.StaleIfUnreachable == nil {
		return DefaultStaleIfUnreachable
	}
	return d.StaleIfUnreachable.Std()
}

// DefaultTargetedFields is the target list of a tier that sets none: the
// field RFC 9213 defines for CDNs, which a caching sidecar is one of.
func DefaultTargetedFields() []string { return []string{"CDN-Cache-Control"} }

// TargetedFields returns the target list as written in the config:
// defaults.targetedCacheControl.fields, or DefaultTargetedFields when it
// is unset. An empty result means targeted fields are off.
func (d Defaults) TargetedFields() []string {
	if d.TargetedCacheControl == nil || d.TargetedCacheControl.Fields == nil {
		return DefaultTargetedFields()
	}
	return d.TargetedCacheControl.Fields
}

// IsEnabled reports whether coalescing is on (unset means on).
func (c Coalescing) IsEnabled() bool { return c.Enabled == nil || *c.Enabled }

// CoalesceClusterWide reports whether misses are coalesced across replicas
// through a Redis lease: coalescing on, L2 configured, and clusterWide not
// set to false.
func (c Config) CoalesceClusterWide() bool {
	return c.Coalescing.IsEnabled() && len(c.L2.Addresses) > 0 &&
		(c.Coalescing.ClusterWide == nil || *c.Coalescing.ClusterWide)
}

// BodyThreshold is the body size above which a body goes to a file (with a
// body directory): bodyStore.threshold, or when unset DefaultBodyThreshold
// capped at l1.maxEntrySize, so that no body is too large for an entry yet
// too small for a file.
func (c Config) BodyThreshold() Size {
	if c.BodyStore.Threshold > 0 {
		return c.BodyStore.Threshold
	}
	if m := c.L1.MaxEntrySize; m > 0 && m < DefaultBodyThreshold {
		return m
	}
	return DefaultBodyThreshold
}

// MaxBodyObjectSize is the largest bodyStore.maxObjectSize a tier may set.
const MaxBodyObjectSize = 1 * Ti

// BodyMaxObjectSize is the largest body stored as a file:
// bodyStore.maxObjectSize, or 1Gi when unset.
func (c Config) BodyMaxObjectSize() Size {
	if c.BodyStore.MaxObjectSize > 0 {
		return c.BodyStore.MaxObjectSize
	}
	return defaultBodyMaxObject
}

// RequestBufferSize is how much of a request body is read before the
// origin is contacted: origin.requestBuffer, 1Mi when unset, 0 with
// origin.streamRequestBodies.
func (c Config) RequestBufferSize() Size {
	switch {
	case c.Origin.StreamRequestBodies:
		return 0
	case c.Origin.RequestBuffer > 0:
		return c.Origin.RequestBuffer
	}
	return DefaultRequestBuffer
}

// L2MaxBodySize is the largest file body also written to L2 in chunks:
// l2.maxBodySize, or 16Mi when unset. Larger file bodies stay local to the
// replica and their entries are not written to L2.
func (c Config) L2MaxBodySize() Size {
	if c.L2.MaxBodySize > 0 {
		return c.L2.MaxBodySize
	}
	return defaultL2MaxBodySize
}

// clone returns a deep copy of c, so that a Compiled config cannot be
// changed through slices or pointers its caller still holds.
func (c Config) clone() Config {
	c.L2.Addresses = cloneSlice(c.L2.Addresses)
	if c.Rules != nil {
		rules := make([]Rule, len(c.Rules))
		for i, r := range c.Rules {
			r.StaleWhileRevalidate = clonePtr(r.StaleWhileRevalidate)
			r.StaleIfError = clonePtr(r.StaleIfError)
			r.CacheKey.QueryInclude = cloneSlice(r.CacheKey.QueryInclude)
			r.CacheKey.QueryExclude = cloneSlice(r.CacheKey.QueryExclude)
			r.CacheKey.Headers = cloneSlice(r.CacheKey.Headers)
			r.CacheKey.Cookies = cloneSlice(r.CacheKey.Cookies)
			r.Match.Headers = cloneSlice(r.Match.Headers)
			r.Match.Cookies = cloneSlice(r.Match.Cookies)
			rules[i] = r
		}
		c.Rules = rules
	}
	c.Defaults.StaleIfUnreachable = clonePtr(c.Defaults.StaleIfUnreachable)
	c.Coalescing.Enabled = clonePtr(c.Coalescing.Enabled)
	c.Coalescing.ClusterWide = clonePtr(c.Coalescing.ClusterWide)
	c.RequestHeaders.Allow = cloneSlice(c.RequestHeaders.Allow)
	c.Defaults.TargetedCacheControl = c.Defaults.TargetedCacheControl.clone()
	cc := &c.Defaults.ContentCoding
	cc.Normalize = clonePtr(cc.Normalize)
	cc.OriginAccepts = cloneSlice(cc.OriginAccepts)
	cc.Compress.Enabled = clonePtr(cc.Compress.Enabled)
	cc.Compress.Types = cloneSlice(cc.Compress.Types)
	c.SecretVersions = maps.Clone(c.SecretVersions)
	return c
}

func cloneSlice[T any](s []T) []T {
	if s == nil {
		return nil
	}
	return append(make([]T, 0, len(s)), s...)
}

func clonePtr[T any](p *T) *T {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}

func ptr[T any](v T) *T { return &v }
