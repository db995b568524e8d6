package sidecar

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/tiercache/tiercache/test/testredis"
)

// adminRequest sends method path to n's admin port with the bearer token
// (none when empty) and returns the status and body.
func adminRequest(t *testing.T, n *node, method, path, token string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, n.admin+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := n.hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// TestTheRunningConfigIsShownWithItsSecretsRedacted: GET /config on the
// admin port answers the config the sidecar runs, secrets (the Redis
// password, the purge token) marked REDACTED and never shown, only with the
// purge token; any other method is refused.
func TestTheRunningConfigIsShownWithItsSecretsRedacted(t *testing.T) {
	rs := testredis.Start(t)
	const token, password = "config-token-0123456789", "the-redis-password"
	sec := newSecretsDir(t, map[string]string{filePurgeToken: token, fileRedisPassword: password, fileInvalidationKey: "config-key-0123456789"})
	cfg := writeConfig(t, smallL1+fmt.Sprintf("l2: {addresses: ['%s']}\nrules: [{name: products, match: {pathPrefix: /products/}, ttl: 5m}]\n", rs.Addr()))
	n := startNode(t, newOrigin(t, 0).URL, "--config", cfg, "--secrets-dir", sec.path, "--tier", "web", "--pod-namespace", "shop", "--pod-name", "a")
	n.waitReady(t)

	for _, tok := range []string{"", "wrong-token-0123456789"} {
		if code, body := adminRequest(t, n, http.MethodGet, "/config", tok); code != http.StatusUnauthorized || strings.Contains(body, "products") {
			t.Errorf("GET /config with token %q: %d %s, want 401 and nothing of the config", tok, code, body)
		}
	}
	if code, _ := adminRequest(t, n, http.MethodPost, "/config", token); code != http.StatusMethodNotAllowed {
		t.Errorf("POST /config: %d, want 405", code)
	}
	code, body := adminRequest(t, n, http.MethodGet, "/config", token)
	if code != http.StatusOK {
		t.Fatalf("GET /config: %d %s", code, body)
	}
	if strings.Contains(body, password) || strings.Contains(body, token) {
		t.Fatalf("GET /config shows a secret:\n%s", body)
	}
	var got struct {
		Version string `json:"version"`
		Config  struct {
			L2 struct {
				Addresses []string `json:"addresses"`
				Password  string   `json:"password"`
			} `json:"l2"`
			Purge struct {
				Token string `json:"token"`
			} `json:"purge"`
			Rules []struct {
				Name string `json:"name"`
			} `json:"rules"`
		} `json:"config"`
	}
	if err := json.Unmarshal([]byte(body), &got); err != nil {
		t.Fatalf("%v\n%s", err, body)
	}
	c := got.Config
	if got.Version == "" || len(c.L2.Addresses) != 1 || c.L2.Addresses[0] != rs.Addr() || c.L2.Password != "REDACTED" ||
		c.Purge.Token != "REDACTED" || len(c.Rules) != 1 || c.Rules[0].Name != "products" {
		t.Errorf("GET /config: %+v (version %q), want the rule, L2's address, both secrets REDACTED and a version", c, got.Version)
	}
	if v := configInfoVersion(t, n); v != got.Version {
		t.Errorf("/config's version %q, tiercache_config_info's %q", got.Version, v)
	}
}

// configInfoVersion is the version label of n's tiercache_config_info
// series whose value is 1.
func configInfoVersion(t *testing.T, n *node) string {
	t.Helper()
	_, body, err := n.adminGet("/metrics")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(body, "\n") {
		rest, ok := strings.CutPrefix(line, "tiercache_config_info{")
		if !ok || !strings.HasSuffix(line, "} 1") {
			continue
		}
		_, v, ok := strings.Cut(rest, `version="`)
		if ok {
			v, _, _ = strings.Cut(v, `"`)
			return v
		}
	}
	return ""
}
