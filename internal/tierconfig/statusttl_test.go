package tierconfig

import (
	"strings"
	"testing"
	"time"
)

func TestStatusTTLsAreValidated(t *testing.T) {
	for name, tc := range map[string]struct{ yaml, want string }{
		"a status a shared cache does not store with a configured lifetime": {
			`defaults: {statusTTLs: [{statuses: [500], ttl: 1m}]}`,
			"defaults.statusTTLs[0].statuses[0]: must be one of 200, 203, 204, 300, 301, 302, 307, 308, 404, 405, 410, 414, 501: the statuses a shared cache may store with a lifetime its configuration gives (got 500)"},
		"206 is stored only as a part": {
			`defaults: {statusTTLs: [{statuses: [206], ttl: 1m}]}`, "defaults.statusTTLs[0].statuses[0]: must be one of"},
		"a status twice": {
			`defaults: {statusTTLs: [{statuses: [301], ttl: 1m}, {statuses: [302, 301], ttl: 1h}]}`,
			"defaults.statusTTLs[1].statuses[1]: 301 is also in defaults.statusTTLs[0]: give each status one lifetime"},
		"no statuses": {`defaults: {statusTTLs: [{statuses: [], ttl: 1m}]}`, "defaults.statusTTLs[0].statuses: must name at least one status"},
		"no lifetime": {`defaults: {statusTTLs: [{statuses: [301]}]}`, "defaults.statusTTLs[0].ttl: must be > 0"},
		"on a rule": {
			`rules: [{name: r, match: {pathPrefix: /}, statusTTLs: [{statuses: [303], ttl: 1m}]}]`,
			"rules[0].statusTTLs[0].statuses[0]: must be one of"},
	} {
		t.Run(name, func(t *testing.T) {
			c, err := Parse([]byte(tc.yaml))
			if err == nil {
				err = c.WithDefaults().Validate()
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

// A rule's statusTTLs replace the tier's; a rule without them takes the
// tier's.
func TestStatusTTLsReachThePolicy(t *testing.T) {
	cc := compileIgnoring(t, `
defaults: {statusTTLs: [{statuses: [301, 302], ttl: 1h}]}
rules:
  - {name: own, match: {pathPrefix: /own/}, statusTTLs: [{statuses: [404], ttl: 1m}]}
  - {name: tier, match: {pathPrefix: /}}
`)
	own, _ := cc.MatchRequest("", "/own/x", nil)
	tier, _ := cc.MatchRequest("", "/x", nil)
	if len(own.Policy.StatusTTLs) != 1 || own.Policy.StatusTTLs[404] != time.Minute {
		t.Errorf("the rule's own: %v, want 404: 1m only", own.Policy.StatusTTLs)
	}
	if len(tier.Policy.StatusTTLs) != 2 || tier.Policy.StatusTTLs[302] != time.Hour || cc.Default.Policy.StatusTTLs[301] != time.Hour {
		t.Errorf("the tier's: %v (default rule %v), want 301 and 302: 1h", tier.Policy.StatusTTLs, cc.Default.Policy.StatusTTLs)
	}
}
