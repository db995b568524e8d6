package tierconfig

import (
	"math"
	"testing"
)

func TestAutoMemoryLimit(t *testing.T) {
	cases := map[string]struct{ l1, want Size }{
		"a 64Mi L1 gets 48Mi more":              {64 * Mi, 112 * Mi},
		"the default 256Mi L1 gets 304Mi":       {256 * Mi, 304 * Mi},
		"a negative size counts as none":        {-1, MemoryAllowance},
		"the largest size saturates, not wraps": {math.MaxInt64, math.MaxInt64},
		"just below saturation still adds":      {math.MaxInt64 - MemoryAllowance, math.MaxInt64},
	}
	for name, c := range cases {
		if got := AutoMemoryLimit(c.l1); got != c.want {
			t.Errorf("%s: AutoMemoryLimit(%d) = %d, want %d", name, c.l1, got, c.want)
		}
	}
}
