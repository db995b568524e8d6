package tierconfig

import (
	"encoding/json"
	"strings"
	"testing"
)

// The choices of docs/caching.md "Choices" that are plain switches: off
// unless set, on the wire only when on, and storePostResponses reaches
// the policy of every rule (the other two are read by the proxy from the
// config).
func TestChoiceSwitchesTravelOnlyWhenOn(t *testing.T) {
	tests := []struct {
		name, doc, wire string
		check           func(Defaults) bool
	}{
		{"updateFromHead turns HEAD updates on", "defaults: {updateFromHead: true}", `"updateFromHead":true`,
			func(d Defaults) bool { return d.UpdateFromHead }},
		{"forwardClientValidators turns forwarding on", "defaults: {forwardClientValidators: true}", `"forwardClientValidators":true`,
			func(d Defaults) bool { return d.ForwardClientValidators }},
		{"storePostResponses turns POST storing on", "defaults: {storePostResponses: true}", `"storePostResponses":true`,
			func(d Defaults) bool { return d.StorePostResponses }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse([]byte(tt.doc))
			if err != nil {
				t.Fatal(err)
			}
			if !tt.check(c.Defaults) {
				t.Fatalf("%q parsed to %+v", tt.doc, c.Defaults)
			}
			js, err := json.Marshal(c)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(js), tt.wire) {
				t.Errorf("%q travels as %s, want %s in it", tt.doc, js, tt.wire)
			}
			if c.Hash() == Default().Hash() {
				t.Errorf("%q hashes like the default config", tt.doc)
			}
			off, err := Parse([]byte(strings.Replace(tt.doc, "true", "false", 1)))
			if err != nil {
				t.Fatal(err)
			}
			name, _, _ := strings.Cut(tt.wire, ":")
			if js, _ := json.Marshal(off); strings.Contains(string(js), name) {
				t.Errorf("the choice set to false still travels: %s", js)
			}
		})
	}
}

func TestStorePostResponsesReachesEveryRulesPolicy(t *testing.T) {
	c, err := Parse([]byte(`
defaults: {storePostResponses: true}
rules:
  - {name: forced, match: {pathPrefix: /a/}, ttl: 1m}
  - {name: plain, match: {pathPrefix: /b/}}
`))
	if err != nil {
		t.Fatal(err)
	}
	cc, err := Compile(c)
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"/a/x", "/b/x", "/elsewhere"} {
		if r := cc.Match("", path, nil); !r.Policy.StorePOST {
			t.Errorf("rule %s (for %s) does not store POST responses", r.Name, path)
		}
	}
	off, err := Compile(Default())
	if err != nil {
		t.Fatal(err)
	}
	if off.Default.Policy.StorePOST {
		t.Error("the default config stores POST responses")
	}
}
