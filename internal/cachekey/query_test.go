package cachekey

import (
	"fmt"
	"strings"
	"testing"
)

// spec is a rule's cacheKey, as tierconfig.CacheKey holds it.
type spec struct {
	QueryInclude, QueryExclude []string
	SortQuery                  bool
	Headers, Cookies           []string
}

// queryRule compiles k as tierconfig compiles a rule's cacheKey.
func queryRule(_ testing.TB, k spec) *Shape {
	s := NewShape(k.QueryInclude, k.QueryExclude, k.SortQuery, k.Headers, k.Cookies)
	return &s
}

func TestAppendQuery(t *testing.T) {
	utm := spec{QueryExclude: []string{"utm_*", "fbclid"}}
	tests := map[string]struct {
		key  spec
		in   string
		want string
	}{
		"without shaping the query is kept byte for byte": {
			spec{}, "b=2&&a=1&a=%41", "b=2&&a=1&a=%41",
		},
		"utm_* parameters are dropped": {
			utm, "id=7&utm_source=x&utm_medium=y&page=2", "id=7&page=2",
		},
		"an exact exclude pattern drops only that name": {
			utm, "fbclid=1&fbclid2=2", "fbclid2=2",
		},
		"the prefix of a wildcard alone is matched too": {
			utm, "utm_=1&utm=2", "utm=2",
		},
		"only included parameters are kept": {
			spec{QueryInclude: []string{"id", "page"}}, "id=7&session=abc&page=2&x", "id=7&page=2",
		},
		"an include wildcard keeps every name with the prefix": {
			spec{QueryInclude: []string{"f_*"}}, "f_color=red&q=1&f_size=m", "f_color=red&f_size=m",
		},
		"names compare case-sensitively": {
			utm, "UTM_source=x&utm_source=y", "UTM_source=x",
		},
		"an encoded name is matched decoded": {
			utm, "utm%5Fsource=x&%75tm_medium=y&id=1", "id=1",
		},
		"a plus in a name is a space": {
			spec{QueryExclude: []string{"a b"}}, "a+b=1&a%20b=2&ab=3", "ab=3",
		},
		"a malformed escape stands for itself": {
			spec{QueryExclude: []string{"%zz"}}, "%zz=1&%z=2", "%z=2",
		},
		"kept pairs keep their original encoding": {
			spec{QueryExclude: []string{"x"}}, "q=a%20b+c&x=1&r=%E2%82%AC", "q=a%20b+c&r=%E2%82%AC",
		},
		"a parameter without a value is decided by its name": {
			utm, "utm_flag&debug", "debug",
		},
		"empty parts are left out": {
			utm, "&&a=1&&b=2&", "a=1&b=2",
		},
		"dropping every parameter leaves nothing": {
			utm, "utm_a=1&utm_b=2", "",
		},
		"an empty query stays empty": {
			utm, "", "",
		},
		"sorting makes parameter order irrelevant": {
			spec{SortQuery: true}, "c=3&a=1&b=2", "a=1&b=2&c=3",
		},
		"sorting orders by name only and keeps the order of duplicates": {
			spec{SortQuery: true}, "a=2&ab=0&a=1&a=10", "a=2&a=1&a=10&ab=0",
		},
		"differently ordered duplicates stay different keys": {
			spec{SortQuery: true}, "b=0&a=1&a=2", "a=1&a=2&b=0",
		},
		"a part hiding a kept parameter behind ';' is kept whole": {
			utm, "id=1&utm_x=1;callback=evil", "id=1&utm_x=1;callback=evil",
		},
		"a part whose ';' pieces are all excluded is dropped": {
			utm, "id=1&utm_a=1;utm_b=2", "id=1",
		},
		"a ';' piece without a value is decided by its name": {
			utm, "utm_x;debug&id=1", "utm_x;debug&id=1",
		},
		"an included parameter behind ';' keeps its part whole": {
			spec{QueryInclude: []string{"id"}}, "x=2;id=1&y=3", "x=2;id=1",
		},
		"an included parameter keeps what ';' glues to it": {
			spec{QueryInclude: []string{"id"}}, "id=1;x=2", "id=1;x=2",
		},
		"a query with ';' in a kept part is not sorted": {
			spec{SortQuery: true}, "b=2&a=1;b=3", "b=2&a=1;b=3",
		},
		"sorting compares the name before the '='": {
			spec{SortQuery: true}, "a-b=1&a=2", "a=2&a-b=1",
		},
		"sorting is stable for equal pairs": {
			spec{SortQuery: true}, "b=1&a&a=&b=1", "a&a=&b=1&b=1",
		},
		"sorting and filtering combine": {
			spec{QueryExclude: []string{"utm_*"}, SortQuery: true}, "z=1&utm_source=x&a=2", "a=2&z=1",
		},
		"sorting drops empty parts too": {
			spec{SortQuery: true}, "b=1&&a=1&", "a=1&b=1",
		},
		"more than 16 parameters are sorted too": {
			spec{SortQuery: true},
			"p19&p18&p17&p16&p15&p14&p13&p12&p11&p10&p09&p08&p07&p06&p05&p04&p03&p02&p01&p00",
			"p00&p01&p02&p03&p04&p05&p06&p07&p08&p09&p10&p11&p12&p13&p14&p15&p16&p17&p18&p19",
		},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			r := queryRule(t, tt.key)
			got := r.AppendQuery([]byte("prefix?"), tt.in)
			if string(got) != "prefix?"+tt.want {
				t.Fatalf("AppendQuery(%q) = %q, want %q", tt.in, strings.TrimPrefix(string(got), "prefix?"), tt.want)
			}
		})
	}
}

func TestAppendQueryDoesNotAllocate(t *testing.T) {
	sixteen := make([]string, 16)
	for i := range sixteen {
		sixteen[i] = fmt.Sprintf("p%02d=%d", 15-i, i)
	}
	tests := map[string]struct {
		key spec
		in  string
	}{
		"an unshaped query":            {spec{}, "a=1&b=2"},
		"an excluded parameter":        {spec{QueryExclude: []string{"utm_*"}}, "utm_source=x&id=1&page=2"},
		"an encoded name":              {spec{QueryExclude: []string{"utm_*"}}, "utm%5Fsource=x&id=1"},
		"sorting 16 parameters":        {spec{SortQuery: true, QueryExclude: []string{"x"}}, strings.Join(sixteen, "&")},
		"an include list with sorting": {spec{SortQuery: true, QueryInclude: []string{"p0*"}}, strings.Join(sixteen, "&")},
		"a part with ';' pieces":       {spec{QueryExclude: []string{"utm_*"}}, "utm_a=1;utm_b=2&id=1&utm_x=1;cb=x"},
		"sorting with ';' pieces":      {spec{SortQuery: true, QueryExclude: []string{"utm_*"}}, "b=1&utm_a=1;utm_b=2&a=1;c=2"},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			r := queryRule(t, tt.key)
			dst := make([]byte, 0, 512)
			if n := testing.AllocsPerRun(200, func() { dst = r.AppendQuery(dst[:0], tt.in) }); n != 0 {
				t.Fatalf("AppendQuery allocates %v times", n)
			}
		})
	}
}

func BenchmarkAppendQuerySorted(b *testing.B) {
	r := queryRule(b, spec{QueryExclude: []string{"utm_*"}, SortQuery: true})
	dst := make([]byte, 0, 256)
	b.ReportAllocs()
	for b.Loop() {
		dst = r.AppendQuery(dst[:0], "q=shoes&utm_source=news&page=2&sort=price&utm_medium=mail&size=42")
	}
}
