package controlplane

import (
	"reflect"
	"testing"

	"github.com/tiercache/tiercache/internal/tierconfig"
)

// A bypass rule's header and cookie conditions survive the wire (a list of
// objects inside the Struct) and keep the version the operator computed.
func TestMatchConditionsSurviveTheWire(t *testing.T) {
	c := richConfig()
	c.Rules = append([]tierconfig.Rule{{Name: "logged-in", Bypass: true, Match: tierconfig.Match{
		PathPrefix: "/",
		Headers:    []tierconfig.HeaderMatch{{Name: "X-Preview", Exact: "1"}, {Name: "X-Edge", Absent: true}, {Name: "User-Agent", Regex: "(?i)bot"}},
		Cookies:    []tierconfig.CookieMatch{{Name: "session", Present: true}, {Name: "ab", Regex: "^b$"}},
	}}}, c.Rules...)
	res, version := mustEncode(t, "shop/frontend", c)
	back, err := Decode(res)
	if err != nil {
		t.Fatalf("Decode: %v", err)
	}
	if !reflect.DeepEqual(back, c.WithDefaults()) {
		t.Fatalf("round trip changed the config:\n got %+v\nwant %+v", back.Rules[0].Match, c.Rules[0].Match)
	}
	if Version(back) != version {
		t.Fatalf("the decoded config has version %q, it was sent as %q", Version(back), version)
	}
}
