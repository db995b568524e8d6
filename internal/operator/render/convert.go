package render

import (
	"errors"
	"fmt"

	"github.com/tiercache/tiercache/internal/api/v1alpha1"
	"github.com/tiercache/tiercache/internal/tierconfig"
)

// convert maps the spec onto the config model field by field, without
// defaults and without Secrets. Sizes and durations that do not convert
// are FieldErrors named by their config-model path (so FieldErrors maps
// them back like any validation error).
func convert(spec v1alpha1.CacheTierSpec) (tierconfig.Config, error) {
	var errs []error
	dur := func(path string, d v1alpha1.Duration) tierconfig.Duration {
		v, err := duration(path, d)
		if err != nil {
			errs = append(errs, err)
		}
		return v
	}
	var c tierconfig.Config
	var err error
	if c.L1.MaxSize, err = quantity("l1.maxSize", spec.L1.MaxSize); err != nil {
		errs = append(errs, err)
	}
	if c.L1.MaxEntrySize, err = quantity("l1.maxEntrySize", spec.L1.MaxEntrySize); err != nil {
		errs = append(errs, err)
	}
	c.L1.Shards = int(spec.L1.Shards)

	if l2 := spec.L2; l2 != nil {
		c.L2 = tierconfig.L2{
			Addresses:  append([]string(nil), l2.Addresses...),
			Mode:       string(l2.Mode),
			MasterName: l2.MasterName,
			Username:   l2.Username,
			Timeout:    dur("l2.timeout", l2.Timeout),
		}
		if l2.TLS != nil {
			c.L2.TLS = l2.TLS.Enabled
		}
		if w := l2.WarmStart; w != nil {
			c.L2.WarmStart = tierconfig.WarmStart{
				Disabled:   w.Disabled,
				MaxEntries: int(w.MaxEntries),
				Timeout:    dur("l2.warmStart.timeout", w.Timeout),
			}
			if c.L2.WarmStart.MaxBytes, err = quantity("l2.warmStart.maxBytes", w.MaxBytes); err != nil {
				errs = append(errs, err)
			}
		}
		if c.L2.MaxBodySize, err = quantity("l2.maxBodySize", l2.MaxBodySize); err != nil {
			errs = append(errs, err)
		}
	}

	// Only the tier-level half of spec.bodyStore: size and medium shape
	// the pod (BodyVolume), not the config.
	if bs := spec.BodyStore; bs != nil {
		if c.BodyStore.Threshold, err = quantity("bodyStore.threshold", bs.Threshold); err != nil {
			errs = append(errs, err)
		}
		if c.BodyStore.MaxObjectSize, err = quantity("bodyStore.maxObjectSize", bs.MaxObjectSize); err != nil {
			errs = append(errs, err)
		}
	}

	c.Origin = tierconfig.Origin{
		Timeout:               dur("origin.timeout", spec.Origin.Timeout),
		ResponseHeaderTimeout: dur("origin.responseHeaderTimeout", spec.Origin.ResponseHeaderTimeout),
		IdleTimeout:           dur("origin.idleTimeout", spec.Origin.IdleTimeout),
		StreamRequestBodies:   spec.Origin.StreamRequestBodies,
	}
	if c.Origin.RequestBuffer, err = quantity("origin.requestBuffer", spec.Origin.RequestBuffer); err != nil {
		errs = append(errs, err)
	}

	d := spec.Defaults
	c.Defaults = tierconfig.Defaults{
		FallbackTTL:               dur("defaults.fallbackTTL", d.FallbackTTL),
		StaleWhileRevalidate:      dur("defaults.staleWhileRevalidate", d.StaleWhileRevalidate),
		StaleIfError:              dur("defaults.staleIfError", d.StaleIfError),
		NegativeTTL:               dur("defaults.negativeTTL", d.NegativeTTL),
		HeuristicFraction:         float64(d.HeuristicPercent) / 100,
		HeuristicMaxTTL:           dur("defaults.heuristicMaxTTL", d.HeuristicMaxTTL),
		HitForMissTTL:             dur("defaults.hitForMissTTL", d.HitForMissTTL),
		AllowSetCookie:            d.AllowSetCookie,
		IgnoreRequestCacheControl: d.IgnoreRequestCacheControl,
		UpdateFromHead:            d.UpdateFromHead,
		ForwardClientValidators:   d.ForwardClientValidators,
		StorePostResponses:        d.StorePostResponses,
		NormalizeAcceptLanguage:   d.NormalizeAcceptLanguage,
		CacheStatus:               d.CacheStatus,
	}
	if d.StaleIfUnreachable != nil {
		v := dur("defaults.staleIfUnreachable", *d.StaleIfUnreachable)
		c.Defaults.StaleIfUnreachable = &v
	}
	c.Defaults.TargetedCacheControl = d.TargetedCacheControl.DeepCopy()

	for i, r := range spec.Rules {
		at := fmt.Sprintf("rules[%d].", i)
		rule := tierconfig.Rule{
			Name:               r.Name,
			Match:              *r.Match.DeepCopy(),
			Bypass:             r.Bypass,
			TTL:                dur(at+"ttl", r.TTL),
			TTLWithCredentials: r.TTLWithCredentials,
			MaxTTL:             dur(at+"maxTTL", r.MaxTTL),
			CacheKey:           *r.CacheKey.DeepCopy(),
		}
		if r.StaleWhileRevalidate != nil {
			v := dur(at+"staleWhileRevalidate", *r.StaleWhileRevalidate)
			rule.StaleWhileRevalidate = &v
		}
		if r.StaleIfError != nil {
			v := dur(at+"staleIfError", *r.StaleIfError)
			rule.StaleIfError = &v
		}
		c.Rules = append(c.Rules, rule)
	}

	c.RequestHeaders = *spec.RequestHeaders.DeepCopy()

	c.AccessLog = *spec.AccessLog.DeepCopy()

	c.Purge.HTTPMethod = spec.Purge.HTTPMethod

	co := spec.Coalescing
	c.Coalescing = tierconfig.Coalescing{
		Timeout: dur("coalescing.timeout", co.Timeout),
	}
	if co.Enabled != nil {
		v := *co.Enabled
		c.Coalescing.Enabled = &v
	}
	if co.ClusterWide != nil {
		v := *co.ClusterWide
		c.Coalescing.ClusterWide = &v
	}
	return c, errors.Join(errs...)
}
