package tierconfig

import (
	"strings"
	"testing"
)

func TestAccessLogValidation(t *testing.T) {
	tests := map[string]struct {
		set   func(*AccessLog)
		field string // "" when valid
	}{
		"an unset access log is valid":                    {func(*AccessLog) {}, ""},
		"sampling 1 percent is valid":                     {func(a *AccessLog) { a.SamplePercent = 1 }, ""},
		"sampling 100 percent is valid":                   {func(a *AccessLog) { a.SamplePercent = 100 }, ""},
		"exact and prefix exclusions are valid":           {func(a *AccessLog) { a.ExcludePaths = []string{"/healthz", "/static/*", "/*"} }, ""},
		"query parameters with a prefix are valid":        {func(a *AccessLog) { a.QueryParams = []string{"page", "utm_*"} }, ""},
		"a negative sample percent is refused":            {func(a *AccessLog) { a.SamplePercent = -1 }, "accessLog.samplePercent"},
		"a sample percent above 100 is refused":           {func(a *AccessLog) { a.SamplePercent = 101 }, "accessLog.samplePercent"},
		"an exclusion without a leading slash is refused": {func(a *AccessLog) { a.ExcludePaths = []string{"/ok", "healthz"} }, "accessLog.excludePaths[1]"},
		"an exclusion with a query is refused":            {func(a *AccessLog) { a.ExcludePaths = []string{"/a?b=c"} }, "accessLog.excludePaths[0]"},
		"an exclusion with an inner star is refused":      {func(a *AccessLog) { a.ExcludePaths = []string{"/a*/b"} }, "accessLog.excludePaths[0]"},
		"an empty query parameter is refused":             {func(a *AccessLog) { a.QueryParams = []string{""} }, "accessLog.queryParams[0]"},
		"a query parameter with an inner star is refused": {func(a *AccessLog) { a.QueryParams = []string{"a*b"} }, "accessLog.queryParams[0]"},
		"65 exclusions are refused": {func(a *AccessLog) {
			a.ExcludePaths = strings.Split(strings.Repeat("/x,", 65)[:3*65-1], ",")
		}, "accessLog.excludePaths"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			c := validConfig()
			tc.set(&c.AccessLog)
			errs := FieldErrors(c.Validate())
			if tc.field == "" {
				if len(errs) != 0 {
					t.Fatalf("refused: %v", errs)
				}
				return
			}
			if len(errs) != 1 || errs[0].Field != tc.field {
				t.Fatalf("errors %v, want one naming %s", errs, tc.field)
			}
		})
	}
}

func TestQueryLog(t *testing.T) {
	tests := map[string]struct {
		params []string
		query  string
		want   string
	}{
		"no listed parameter logs no query":           {nil, "token=s3cret&page=2", ""},
		"only listed parameters are logged":           {[]string{"page"}, "token=s3cret&page=2&sort=asc", "page=2"},
		"a prefix pattern keeps every match in order": {[]string{"utm_*"}, "utm_b=1&x=2&utm_a=3", "utm_b=1&utm_a=3"},
		"names compare percent-decoded":               {[]string{"page"}, "p%61ge=3&sig=x", "p%61ge=3"},
		"a part holding a semicolon is left out":      {[]string{"page"}, "page=1;token=s3cret&page=2", "page=2"},
		"a parameter without a value is kept by name": {[]string{"debug"}, "debug&x=1", "debug"},
		"empty parts are skipped":                     {[]string{"a"}, "&&a=1&&", "a=1"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			q := NewQueryLog(tc.params)
			if got := string(q.Append(nil, tc.query)); got != tc.want {
				t.Fatalf("Append(%q) = %q, want %q", tc.query, got, tc.want)
			}
		})
	}
}
