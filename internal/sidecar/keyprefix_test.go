package sidecar

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/tiercache/tiercache/internal/tierconfig"
)

func TestAConfigNamingAnotherTiersKeyPrefixIsRefused(t *testing.T) {
	foreign := smallL1 + "l2: {keyPrefix: 'tc:bank/accounts:'}\n"
	want := []string{"l2.keyPrefix", `"tc:bank/accounts:"`, `"tc:shop/web:"`}
	checkErr := func(t *testing.T, what string, err error) {
		t.Helper()
		if err == nil {
			t.Fatalf("%s: accepted", what)
		}
		for _, w := range want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q does not name %s", what, err, w)
			}
		}
	}

	t.Run("a config file is a start-up error", func(t *testing.T) {
		// Bounded: a sidecar that accepted the config would serve until
		// the context ends.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		err := RunWith(ctx, []string{"--upstream", "http://127.0.0.1:1", "--config", writeConfig(t, foreign),
			"--tier", "web", "--pod-namespace", "shop", "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"}, noEnv, io.Discard, nil)
		checkErr(t, "--config", err)
	})

	t.Run("a pushed config is NACKed and changes nothing", func(t *testing.T) {
		dp := newTestDataPlane(t, Options{Tier: "web", PodNamespace: "shop"}, tierconfig.Default())
		first, compiled := dp.cur.Load(), dp.holder.Load()
		pushed, err := tierconfig.Parse([]byte(foreign))
		if err != nil {
			t.Fatal(err)
		}
		checkErr(t, "Apply", dp.Apply(context.Background(), pushed, "v1"))
		if dp.cur.Load() != first || dp.holder.Load() != compiled {
			t.Fatal("a refused config changed the data plane")
		}
		// The tier's own prefix spelled out is fine.
		own, err := tierconfig.Parse([]byte(smallL1 + "l2: {keyPrefix: 'tc:shop/web:'}\n"))
		if err != nil {
			t.Fatal(err)
		}
		if err := dp.Apply(context.Background(), own, "v2"); err != nil {
			t.Fatalf("the sidecar's own prefix was refused: %v", err)
		}
	})
}

func TestASidecarWithL2AndNoInvalidationKeyWarnsThatTheChannelIsUnauthenticated(t *testing.T) {
	const warning = "the invalidation channel is unauthenticated"
	for _, c := range []struct {
		name  string
		files map[string]string
		warns bool
	}{
		{"without a key it warns", map[string]string{}, true},
		{"with a key it does not", map[string]string{fileInvalidationKey: "k-0123456789abcdef"}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			logs := &logBuffer{}
			n := startNodeLogging(t, logs, plainOrigin(t), "--config", writeConfig(t, smallL1),
				"--redis-addr", "127.0.0.1:1", "--secrets-dir", newSecretsDir(t, c.files).path)
			n.shutdown(t)
			if got := strings.Contains(logs.String(), warning); got != c.warns {
				t.Fatalf("warned %v, want %v; log:\n%s", got, c.warns, logs.String())
			}
		})
	}
}
