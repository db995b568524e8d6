package l1_test

import (
	"strings"
	"testing"
	"time"

	"github.com/tiercache/tiercache/internal/store/l1"
)

func TestValidate(t *testing.T) {
	with := func(f func(*l1.Config)) l1.Config {
		// The sidecar's default sizes.
		c := l1.Config{MaxSize: 256 << 20, MaxEntrySize: 1 << 20, Shards: 256, LifeWindow: 24 * time.Hour}
		f(&c)
		return c
	}
	tests := map[string]struct {
		cfg  l1.Config
		want []string // substrings of the error; none means valid
	}{
		"an entry limit of a whole shard is valid": {
			cfg: with(func(c *l1.Config) { c.MaxSize = 64 << 20; c.Shards = 64; c.MaxEntrySize = 1 << 20 }),
		},
		"a size that is not whole MiB is valid": {
			cfg: with(func(c *l1.Config) { c.MaxSize = 1000000; c.Shards = 16; c.MaxEntrySize = 4096 }),
		},
		"an entry larger than a shard is refused": {
			cfg:  with(func(c *l1.Config) { c.MaxEntrySize = 2 << 20 }),
			want: []string{"l1.maxEntrySize: 2097152 exceeds maxSize/shards (1048576)"},
		},
		"a shard count that is not a power of two is refused": {
			cfg:  with(func(c *l1.Config) { c.Shards = 100 }),
			want: []string{"l1.shards: 100 is not a power of two"},
		},
		"zero shards are refused": {
			cfg:  with(func(c *l1.Config) { c.Shards = 0 }),
			want: []string{"l1.shards: 0"},
		},
		"a zero size is refused": {
			cfg:  with(func(c *l1.Config) { c.MaxSize = 0 }),
			want: []string{"l1.maxSize: 0 must be > 0"},
		},
		"shards smaller than 4KiB are refused": {
			cfg:  with(func(c *l1.Config) { c.MaxSize = 1 << 20; c.Shards = 1024; c.MaxEntrySize = 512 }),
			want: []string{"l1.maxSize: 1048576 gives 1024 bytes per shard", "lower l1.shards"},
		},
		"shards beyond bigcache's 4GiB index are refused": {
			cfg:  with(func(c *l1.Config) { c.MaxSize = 8 << 30; c.Shards = 1 }),
			want: []string{"l1.maxSize: 8589934592 gives more than 4Gi per shard"},
		},
		"a zero entry limit is refused": {
			cfg:  with(func(c *l1.Config) { c.MaxEntrySize = 0 }),
			want: []string{"l1.maxEntrySize: 0 must be > 0"},
		},
		"a life window under bigcache's one second is refused": {
			cfg:  with(func(c *l1.Config) { c.LifeWindow = 500 * time.Millisecond }),
			want: []string{"l1.lifeWindow: 500ms is below bigcache's resolution of 1s"},
		},
		"every problem is reported at once": {
			cfg:  l1.Config{Shards: 3},
			want: []string{"l1.shards:", "l1.maxSize:", "l1.maxEntrySize:", "l1.lifeWindow:"},
		},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			err := tt.cfg.Validate()
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatalf("Validate = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatal("Validate = nil, want an error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Validate = %q, want it to contain %q", err, w)
				}
			}
		})
	}
}
