package httpcache_test

import (
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/tiercache/tiercache/internal/httpcache"
)

func TestTags(t *testing.T) {
	many := make([]string, 100)
	for i := range many {
		many[i] = fmt.Sprintf("t%d", i)
	}
	long := strings.Repeat("x", 257)
	edge := strings.Repeat("y", 256)
	tests := []struct {
		name string
		h    httpcache.Header
		want []string
	}{
		{"no tag fields give nothing", hdr(), nil},
		{"Surrogate-Key is space separated", hdr("Surrogate-Key", "a b\tc"), []string{"a", "b", "c"}},
		{"Cache-Tag is comma separated", hdr("Cache-Tag", "a, b ,c"), []string{"a", "b", "c"}},
		{"a comma is part of a surrogate key", hdr("Surrogate-Key", "a,b"), []string{"a,b"}},
		{"a space is part of a cache tag", hdr("Cache-Tag", "a b"), []string{"a b"}},
		{"both fields are combined, Surrogate-Key first", hdr("Cache-Tag", "c", "Surrogate-Key", "s"), []string{"s", "c"}},
		{"several field lines are read", hdr("Surrogate-Key", "a", "Surrogate-Key", "b", "Cache-Tag", "c", "Cache-Tag", "d"),
			[]string{"a", "b", "c", "d"}},
		{"duplicates keep the first-seen order", hdr("Surrogate-Key", "b a b", "Cache-Tag", "a,c,b"), []string{"b", "a", "c"}},
		{"empty tags are dropped", hdr("Surrogate-Key", "  a   ", "Cache-Tag", ",, ,b,"), []string{"a", "b"}},
		{"tags are case-sensitive", hdr("Surrogate-Key", "A a"), []string{"A", "a"}},
		{"a tag over 256 bytes is dropped", hdr("Surrogate-Key", long+" ok "+edge), []string{"ok", edge}},
		{"at most 64 tags are kept", hdr("Surrogate-Key", strings.Join(many, " ")), many[:64]},
		{"the cap counts both fields", hdr("Surrogate-Key", strings.Join(many[:60], " "), "Cache-Tag", strings.Join(many[50:], ",")),
			many[:64]},
		{"only empty values give nothing", hdr("Surrogate-Key", " ", "Cache-Tag", ","), nil},
		{"another Header kind is read", entryHeader{{"surrogate-key", "a"}, {"cache-tag", "b"}}, []string{"a", "b"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := httpcache.Tags(tt.h); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Tags = %q, want %q", got, tt.want)
			}
		})
	}
}
