package render

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/tiercache/tiercache/internal/api/v1alpha1"
	"github.com/tiercache/tiercache/internal/tierconfig"
)

// spec.accessLog reaches the sidecar's config field by field; what the
// tier leaves unset stays unset (the sidecar's flags decide), and a tier
// that says nothing pushes no accessLog at all.
func TestAccessLogIsCarried(t *testing.T) {
	off, on := false, true
	tests := map[string]struct {
		spec v1alpha1.AccessLogSpec
		want tierconfig.AccessLog
		wire string
	}{
		"a tier that turns the log off says so": {
			v1alpha1.AccessLogSpec{Enabled: &off},
			tierconfig.AccessLog{Enabled: &off}, `"accessLog":{"enabled":false}`},
		"a tier that turns it on says so": {
			v1alpha1.AccessLogSpec{Enabled: &on},
			tierconfig.AccessLog{Enabled: &on}, `"accessLog":{"enabled":true}`},
		"sampling, exclusions, query parameters and X-Forwarded-For are carried": {
			v1alpha1.AccessLogSpec{SamplePercent: 10, ExcludePaths: []string{"/healthz", "/static/*"},
				QueryParams: []string{"page", "utm_*"}, TrustForwardedFor: true},
			tierconfig.AccessLog{SamplePercent: 10, ExcludePaths: []string{"/healthz", "/static/*"},
				QueryParams: []string{"page", "utm_*"}, TrustForwardedFor: true},
			`"accessLog":{"samplePercent":10,"excludePaths":["/healthz","/static/*"],"queryParams":["page","utm_*"],"trustForwardedFor":true}`},
		"a tier that says nothing pushes nothing": {v1alpha1.AccessLogSpec{}, tierconfig.AccessLog{}, ""},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			c, err := Redacted(tier(v1alpha1.CacheTierSpec{AccessLog: tt.spec}))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(c.AccessLog, tt.want) {
				t.Fatalf("rendered accessLog %+v, want %+v", c.AccessLog, tt.want)
			}
			js, err := json.Marshal(c)
			if err != nil {
				t.Fatal(err)
			}
			if tt.wire == "" && strings.Contains(string(js), `"accessLog"`) {
				t.Errorf("the pushed config names accessLog:\n%s", js)
			}
			if tt.wire != "" && !strings.Contains(string(js), tt.wire) {
				t.Errorf("the pushed config is\n%s\nwant it to carry %s", js, tt.wire)
			}
		})
	}
}
