package main

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// FloodConfig describes the URLs of the flood scenario.
type FloodConfig struct {
	// Base is the server's URL; empty gives origin-form targets for a run
	// over Config.Bases.
	Base string
	// Prefix goes before the request number in the path: request n asks
	// for <Base>/bytes/<Prefix><n>?size=<Size>&ttl=<TTL>.
	Prefix string
	// Size and TTL are passed to the demo origin's /bytes route.
	Size, TTL int
}

// Flood is a key space without end: every request of a run asks for a key
// no request asked for before, so a cache stores (or evicts) one entry per
// request. It implements Generator.
type Flood struct {
	head, query string
}

// NewFlood checks cfg and returns its generator.
func NewFlood(cfg FloodConfig) (*Flood, error) {
	if cfg.Base != "" {
		if err := CheckLoopback(cfg.Base); err != nil {
			return nil, fmt.Errorf("--base: %w", err)
		}
	}
	if cfg.Size < 0 || cfg.TTL < 0 {
		return nil, errors.New("--size, --ttl: must be >= 0")
	}
	if strings.ContainsAny(cfg.Prefix, "/?#% ") {
		return nil, fmt.Errorf("--prefix: %q must not contain / ? # %% or spaces", cfg.Prefix)
	}
	return &Flood{
		head:  strings.TrimSuffix(cfg.Base, "/") + "/bytes/" + cfg.Prefix,
		query: fmt.Sprintf("?size=%d&ttl=%d", cfg.Size, cfg.TTL),
	}, nil
}

// Target returns request n's URL: distinct n give distinct keys.
func (f *Flood) Target(n uint64) Target {
	return Target{URL: f.head + strconv.FormatUint(n, 10) + f.query}
}
