package sidecar

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tiercache/tiercache/internal/tierconfig"
)

func TestStartupConfigOrder(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	withState := func(t *testing.T, content string) string {
		dir := t.TempDir()
		if content != "" {
			if err := os.WriteFile(filepath.Join(dir, LastGoodFile), []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		return dir
	}
	file := filepath.Join(t.TempDir(), "tier.yaml")
	if err := os.WriteFile(file, []byte("l1: {maxSize: 32Mi}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := map[string]struct {
		opts       func(t *testing.T) Options
		wantSize   tierconfig.Size
		wantSource string
		wantErr    string
	}{
		"the last good config wins over the pod-spec config": {
			opts: func(t *testing.T) Options {
				return Options{StateDir: withState(t, `{"l1":{"maxSize":"16Mi"}}`), InitialConfig: `{"l1":{"maxSize":"8Mi"}}`}
			},
			wantSize: 16 << 20, wantSource: LastGoodFile,
		},
		"an invalid last good config is skipped for the pod-spec config": {
			opts: func(t *testing.T) Options {
				return Options{StateDir: withState(t, `{"l1":{"maxSize":"1Ki"}}`), InitialConfig: `{"l1":{"maxSize":"8Mi"}}`}
			},
			wantSize: 8 << 20, wantSource: "--initial-config",
		},
		"a last good config of another tier's key prefix is skipped for the pod-spec config": {
			opts: func(t *testing.T) Options {
				return Options{StateDir: withState(t, `{"l1":{"maxSize":"16Mi"},"l2":{"keyPrefix":"tc:bank/accounts:"}}`),
					InitialConfig: `{"l1":{"maxSize":"8Mi"}}`, Tier: "web", PodNamespace: "shop"}
			},
			wantSize: 8 << 20, wantSource: "--initial-config",
		},
		"an empty state directory falls through to the config file": {
			opts:     func(t *testing.T) Options { return Options{StateDir: withState(t, ""), ConfigFile: file} },
			wantSize: 32 << 20, wantSource: file,
		},
		"nothing given means the built-in defaults": {
			opts:     func(t *testing.T) Options { return Options{} },
			wantSize: tierconfig.Default().L1.MaxSize, wantSource: "built-in defaults",
		},
		"an invalid pod-spec config is an error naming the flag": {
			opts:    func(t *testing.T) Options { return Options{InitialConfig: `{"l1":{"maxSize":"1Ki"}}`} },
			wantErr: "--initial-config",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			c, src, err := startupConfig(tc.opts(t), quiet)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.L1.MaxSize != tc.wantSize || !strings.HasSuffix(src, tc.wantSource) {
				t.Errorf("got %s from %q, want %s from %q", c.L1.MaxSize, src, tc.wantSize, tc.wantSource)
			}
		})
	}
}

func TestSecretFlagsFillOnlyWhatTheConfigLeavesEmpty(t *testing.T) {
	o := Options{RedisPassword: "env-pass", PurgeToken: "env-token-0123456789", RedisCACert: "env-ca"}
	var redacted tierconfig.Config
	applyFlags(&redacted, o)
	if redacted.L2.Password != "env-pass" || redacted.Purge.Token != "env-token-0123456789" || redacted.L2.CACert != "env-ca" {
		t.Errorf("a redacted config was not filled: %+v %+v", redacted.L2, redacted.Purge)
	}
	pushed := tierconfig.Config{L2: tierconfig.L2{Password: "rotated"}, Purge: tierconfig.Purge{Token: "rotated-token-0123456789"}}
	applyFlags(&pushed, o)
	if pushed.L2.Password != "rotated" || pushed.Purge.Token != "rotated-token-0123456789" {
		t.Errorf("the environment overrode a pushed (rotated) secret: %+v %+v", pushed.L2, pushed.Purge)
	}
}

func TestConfigAndInitialConfigTogetherAreRefused(t *testing.T) {
	_, err := ParseArgs([]string{"--upstream=http://127.0.0.1:1", "--config=a.yaml"}, func(k string) string {
		if k == "TIERCACHE_INITIAL_CONFIG" {
			return "{}"
		}
		return ""
	}, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "--initial-config") {
		t.Errorf("got %v", err)
	}
}
