package tierconfig

import (
	"net/http"
	"sync/atomic"
	"time"

	"github.com/tiercache/tiercache/internal/httpcache"
)

// Size is a byte count. JSON/YAML: a Kubernetes-style quantity string
// ("512Mi", "1Gi", "64Ki", "1M", "1500") or a plain number. It marshals to
// its canonical string (binary suffix when exact, else plain bytes).
type Size int64

// Duration is a time.Duration. JSON/YAML: a Go duration string ("30s",
// "1h30m"); it marshals to time.Duration.String().
type Duration time.Duration

// Std returns d as a time.Duration.
func (d Duration) Std() time.Duration { return time.Duration(d) }

// Default returns the built-in config: the one the sidecar runs with when
// nothing else is given. TODO(helper)
func Default() Config { panic("not implemented") }

// Parse decodes a YAML or JSON config strictly (unknown fields are errors
// naming the field), fills defaults for unset fields, and validates.
func Parse(data []byte) (Config, error) { panic("not implemented") }

// Load reads and Parses a file.
func Load(path string) (Config, error) { panic("not implemented") }

// Validate checks every field and returns all problems joined, each
// naming its field path ("l1.maxEntrySize: must be <= l1.maxSize/l1.shards
// (1Mi)", "rules[2].match: exactly one of path, pathPrefix, regex").
func (c Config) Validate() error { panic("not implemented") }

// Hash is the hex sha256 of the canonical JSON of c: equal configs hash
// equal across processes and restarts.
func (c Config) Hash() string { panic("not implemented") }

// Compiled is a validated config ready for the request path: rules
// compiled, per-rule caching policy precomputed. It is immutable.
type Compiled struct {
	Config Config
	Hash   string
	// Default is the rule applied when no rule matches (no key shaping,
	// tier defaults).
	Default *CompiledRule
	rules   []*CompiledRule
}

// CompiledRule is one rule ready for the request path.
type CompiledRule struct {
	Name   string
	Bypass bool
	// Policy is the httpcache policy for responses under this rule.
	Policy httpcache.Policy
	// ShapesQuery is true when the rule changes the query part of the key.
	ShapesQuery bool
	// HasKeyExtras is true when headers or cookies join the key.
	HasKeyExtras bool
	// private compiled state (matchers, query filters)
}

// Compile validates c (filling defaults first) and compiles it.
func Compile(c Config) (*Compiled, error) { panic("not implemented") }

// Match returns the first rule matching path, or c.Default. It does not
// allocate.
func (c *Compiled) Match(path string) *CompiledRule { panic("not implemented") }

// AppendQuery appends the key form of rawQuery under r to dst: unchanged
// when the rule does not shape queries; else parameters filtered by
// include/exclude lists (trailing * = prefix), optionally sorted, and
// re-joined with '&' keeping their original encoding.
func (r *CompiledRule) AppendQuery(dst []byte, rawQuery string) []byte {
	panic("not implemented")
}

// AppendKeyExtras appends the rule's extra key parts (listed request header
// values and cookie values, each tagged with its name) to dst.
func (r *CompiledRule) AppendKeyExtras(dst []byte, req *http.Request) []byte {
	panic("not implemented")
}

// Holder holds the config in effect and swaps it atomically.
type Holder struct{ p atomic.Pointer[Compiled] }

// NewHolder returns a Holder serving c.
func NewHolder(c *Compiled) *Holder {
	h := &Holder{}
	h.p.Store(c)
	return h
}

// Load returns the config in effect.
func (h *Holder) Load() *Compiled { return h.p.Load() }

// Store swaps in c.
func (h *Holder) Store(c *Compiled) { h.p.Store(c) }
