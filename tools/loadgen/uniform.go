package main

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync/atomic"
)

// MaxUniformKeys bounds the key space of the uniform scenario.
const MaxUniformKeys = 1_000_000

// UniformConfig describes the URLs of the uniform scenario.
type UniformConfig struct {
	// Base is the server's URL; empty gives origin-form targets for a run
	// over Config.Bases.
	Base string
	Keys int
	// Prefix goes before the key number in the path: key n is
	// <Base>/bytes/<Prefix><n>?size=<Size>&ttl=<TTL>.
	Prefix string
	// Size and TTL are passed to the demo origin's /bytes route.
	Size, TTL int
}

// Uniform is a key space whose keys are all equally likely: a working set
// larger than one cache layer (an L1 that holds a fraction of it) shows
// up as that layer's miss rate. It implements Chooser over its Targets.
type Uniform struct {
	Targets []Target
}

// NewUniform lays out the URLs of cfg.
func NewUniform(cfg UniformConfig) (*Uniform, error) {
	if cfg.Base != "" {
		if err := CheckLoopback(cfg.Base); err != nil {
			return nil, fmt.Errorf("--base: %w", err)
		}
	}
	if cfg.Keys < 1 || cfg.Keys > MaxUniformKeys {
		return nil, fmt.Errorf("--keys: must be between 1 and %d", MaxUniformKeys)
	}
	if cfg.Size < 0 || cfg.TTL < 0 {
		return nil, errors.New("--size, --ttl: must be >= 0")
	}
	if strings.ContainsAny(cfg.Prefix, "/?#% ") {
		return nil, fmt.Errorf("--prefix: %q must not contain / ? # %% or spaces", cfg.Prefix)
	}
	base := strings.TrimSuffix(cfg.Base, "/")
	query := fmt.Sprintf("?size=%d&ttl=%d", cfg.Size, cfg.TTL)
	u := &Uniform{Targets: make([]Target, cfg.Keys)}
	for k := range u.Targets {
		u.Targets[k] = Target{URL: base + "/bytes/" + cfg.Prefix + strconv.Itoa(k) + query}
	}
	return u, nil
}

// Choose picks a key uniformly.
func (u *Uniform) Choose(r *rand.Rand) int { return r.IntN(len(u.Targets)) }

// Sequence is a Chooser that hands out 0, 1, 2, ... n-1, 0, ... across all
// workers: with MaxRequests = n, a run requests every target exactly once.
type Sequence struct {
	n    int
	next atomic.Uint64
}

// NewSequence returns a sequence over n targets.
func NewSequence(n int) *Sequence { return &Sequence{n: n} }

// Choose returns the next index; r is not used.
func (s *Sequence) Choose(*rand.Rand) int { return int((s.next.Add(1) - 1) % uint64(s.n)) }
