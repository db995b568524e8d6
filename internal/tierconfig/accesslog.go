package tierconfig

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/tiercache/tiercache/internal/cachekey"
)

// AccessLog is the tier's say over the sidecar's access log (one JSON
// line per request on the sidecar's stdout, internal/accesslog). Every
// field is optional: a field the tier leaves unset takes the value of the
// sidecar's matching --access-log* flag, so the flags set the default
// and the tier, when it says something, wins (docs/operations.md "Access
// log"). The zero value says nothing and is left off the wire, so a tier
// that does not set it pushes the same JSON as before it existed.
// +kubebuilder:object:generate=true
type AccessLog struct {
	// Enabled turns the access log on or off (default: the sidecar's
	// --access-log, on).
	// +optional
	Enabled *bool `json:"enabled,omitempty"`
	// SamplePercent logs this share of the requests, chosen at random;
	// answers with a 5xx status are always logged (default: the
	// sidecar's --access-log-sample-percent, 100).
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	SamplePercent int32 `json:"samplePercent,omitempty"`
	// ExcludePaths are request paths never logged: exact ("/healthz"), or
	// a prefix when the entry ends in '*' ("/static/*"). Setting it
	// replaces the sidecar's --access-log-exclude.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=2048
	// +kubebuilder:validation:items:Pattern=`^/[^?#*]*\*?$`
	// +listType=set
	ExcludePaths []string `json:"excludePaths,omitempty"`
	// QueryParams names the query parameters logged (a trailing '*' is a
	// prefix; names compare percent-decoded and case-sensitively); the
	// query is otherwise left out of the log, since its values may be
	// secrets (tokens, signatures). Parameters not listed, and parts
	// holding a ';', are left out.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=256
	// +kubebuilder:validation:items:Pattern=`^[^*]*\*?$`
	// +kubebuilder:validation:items:MinLength=1
	// +listType=set
	QueryParams []string `json:"queryParams,omitempty"`
	// TrustForwardedFor logs the client address from the last
	// X-Forwarded-For entry instead of the connection's peer. Set it only
	// when every request reaches the sidecar through a proxy that appends
	// it (an ingress, a mesh).
	// +optional
	TrustForwardedFor bool `json:"trustForwardedFor,omitempty"`
}

// maxAccessLogPatterns bounds accessLog.excludePaths and queryParams.
const maxAccessLogPatterns = 64

func (a AccessLog) validate(p *problems) {
	if a.SamplePercent < 0 || a.SamplePercent > 100 {
		p.add("accessLog.samplePercent", "must be between 1 and 100, or 0 for the sidecar's default (got %d)", a.SamplePercent)
	}
	if len(a.ExcludePaths) > maxAccessLogPatterns {
		p.add("accessLog.excludePaths", "at most %d entries (got %d)", maxAccessLogPatterns, len(a.ExcludePaths))
	}
	for i, s := range a.ExcludePaths {
		if err := CheckAccessLogPath(s); err != "" {
			p.add(fmt.Sprintf("accessLog.excludePaths[%d]", i), "%s", err)
		}
	}
	if len(a.QueryParams) > maxAccessLogPatterns {
		p.add("accessLog.queryParams", "at most %d entries (got %d)", maxAccessLogPatterns, len(a.QueryParams))
	}
	checkPatterns(p, "accessLog.queryParams", a.QueryParams)
}

// CheckAccessLogPath returns what is wrong with one access-log path
// exclusion ("" when nothing is): it starts with '/', has no query, and a
// '*' only as its last character. The sidecar's --access-log-exclude
// flag is checked the same way.
func CheckAccessLogPath(s string) string {
	switch {
	case !strings.HasPrefix(s, "/"):
		return "must start with '/' (got " + strconv.Quote(s) + ")"
	case strings.ContainsAny(s, "?#"):
		return "must be a path without query or fragment (got " + strconv.Quote(s) + ")"
	case strings.Contains(s[:len(s)-1], "*"):
		return "'*' is allowed only as the last character (got " + strconv.Quote(s) + ")"
	}
	return ""
}

// QueryLog picks the query parameters an access log line may show
// (AccessLog.QueryParams). The zero value keeps none.
type QueryLog struct{ f cachekey.ParamFilter }

// NewQueryLog compiles an accessLog.queryParams list.
func NewQueryLog(params []string) QueryLog {
	return QueryLog{f: cachekey.NewParamFilter(params)}
}

// Empty reports whether no parameter is ever kept.
func (q *QueryLog) Empty() bool { return q.f.Empty() }

// Append appends the parts of rawQuery whose name is listed, as received
// and joined by '&', to dst. A part holding a ';' is left out: an origin
// that splits on ';' would read a name in it that is not listed.
func (q *QueryLog) Append(dst []byte, rawQuery string) []byte {
	if q.Empty() {
		return dst
	}
	sep := false
	for rest := rawQuery; rest != ""; {
		var part string
		part, rest, _ = strings.Cut(rest, "&")
		if part == "" || strings.IndexByte(part, ';') >= 0 || !q.f.Keeps(part) {
			continue
		}
		if sep {
			dst = append(dst, '&')
		}
		dst = append(dst, part...)
		sep = true
	}
	return dst
}
