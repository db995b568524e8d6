package l1_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tiercache/tiercache/internal/store/l1"
)

// validConfig is the sidecar's default L1 (tierconfig's defaults).
func validConfig() l1.Config {
	return l1.Config{MaxSize: 256 << 20, MaxEntrySize: 1 << 20, Shards: 256, LifeWindow: l1.LifeWindow}
}

func TestValidate(t *testing.T) {
	with := func(f func(*l1.Config)) l1.Config {
		c := validConfig()
		f(&c)
		return c
	}
	tests := map[string]struct {
		cfg  l1.Config
		want []string // the errors, in order; none means valid
	}{
		"the sidecar's default is valid": {cfg: validConfig()},
		"an entry limit of a whole shard is valid": {
			cfg: with(func(c *l1.Config) { c.MaxSize = 64 << 20; c.Shards = 64; c.MaxEntrySize = 1 << 20 }),
		},
		"a size that is not whole MiB is valid": {
			cfg: with(func(c *l1.Config) { c.MaxSize = 1500000; c.Shards = 16; c.MaxEntrySize = 4096 }),
		},
		"8192 shards are valid": {
			cfg: with(func(c *l1.Config) { c.MaxSize = 32 << 20; c.Shards = 8192; c.MaxEntrySize = 4096 }),
		},
		"an entry larger than a shard is refused": {
			cfg:  with(func(c *l1.Config) { c.MaxEntrySize = 2 << 20 }),
			want: []string{"l1.maxEntrySize: must be <= l1.maxSize/l1.shards = 1Mi (got 2Mi)"},
		},
		"a shard count that is not a power of two is refused": {
			cfg:  with(func(c *l1.Config) { c.Shards = 100 }),
			want: []string{"l1.shards: must be a power of two between 1 and 8192 (got 100)"},
		},
		"zero shards are refused": {
			cfg:  with(func(c *l1.Config) { c.Shards = 0 }),
			want: []string{"l1.shards: must be a power of two between 1 and 8192 (got 0)"},
		},
		"more than 8192 shards are refused": {
			cfg:  with(func(c *l1.Config) { c.MaxSize = 1 << 30; c.Shards = 16384; c.MaxEntrySize = 4096 }),
			want: []string{"l1.shards: must be a power of two between 1 and 8192 (got 16384)"},
		},
		"a zero size is refused": {
			cfg:  with(func(c *l1.Config) { c.MaxSize = 0 }),
			want: []string{"l1.maxSize: must be >= 1Mi (got 0)"},
		},
		"a size under a MiB is refused, as bigcache would take a MiB anyway": {
			cfg:  with(func(c *l1.Config) { c.MaxSize = 512 << 10; c.Shards = 1; c.MaxEntrySize = 1024 }),
			want: []string{"l1.maxSize: must be >= 1Mi (got 512Ki)"},
		},
		"shards smaller than 4KiB are refused": {
			cfg:  with(func(c *l1.Config) { c.MaxSize = 1 << 20; c.Shards = 1024; c.MaxEntrySize = 512 }),
			want: []string{"l1.shards: l1.maxSize/l1.shards = 1Ki per shard is below the 4Ki minimum; use fewer shards (got 1024)"},
		},
		"shards beyond bigcache's 4GiB index are refused": {
			cfg:  with(func(c *l1.Config) { c.MaxSize = 8 << 30; c.Shards = 1 }),
			want: []string{"l1.shards: l1.maxSize/l1.shards = 8Gi per shard is not below the 4Gi maximum; use more shards (got 1)"},
		},
		"a shard of exactly 4GiB is refused, one byte past bigcache's index": {
			cfg:  with(func(c *l1.Config) { c.MaxSize = 4 << 30; c.Shards = 1 }),
			want: []string{"l1.shards: l1.maxSize/l1.shards = 4Gi per shard is not below the 4Gi maximum; use more shards (got 1)"},
		},
		"a zero entry limit is refused": {
			cfg:  with(func(c *l1.Config) { c.MaxEntrySize = 0 }),
			want: []string{"l1.maxEntrySize: must be > 0 (got 0)"},
		},
		"a life window under bigcache's one second is refused": {
			cfg:  with(func(c *l1.Config) { c.LifeWindow = 500 * time.Millisecond }),
			want: []string{"l1.lifeWindow: must be >= 1s, bigcache's resolution (got 500ms)"},
		},
		"every problem is reported at once": {
			cfg: l1.Config{Shards: 3},
			want: []string{
				"l1.maxSize: must be >= 1Mi (got 0)",
				"l1.shards: must be a power of two between 1 and 8192 (got 3)",
				"l1.maxEntrySize: must be > 0 (got 0)",
				"l1.lifeWindow: must be >= 1s, bigcache's resolution (got 0s)",
			},
		},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			err := tt.cfg.Validate()
			var got []string
			if j, ok := err.(interface{ Unwrap() []error }); ok {
				for _, e := range j.Unwrap() {
					var fe *l1.FieldError
					if !errors.As(e, &fe) {
						t.Errorf("%v is not a *l1.FieldError", e)
					}
					got = append(got, e.Error())
				}
			} else if err != nil {
				t.Fatalf("Validate = %v, not joined FieldErrors", err)
			}
			if strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
				t.Errorf("Validate =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
		})
	}
}
