package kubectlplugin

import (
	"encoding/json"
	"testing"

	"github.com/tiercache/tiercache/internal/version"
)

func TestVersionNeedsNoCluster(t *testing.T) {
	build := version.Get()
	line := "kubectl-tiercache " + build.String() + "\n"
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"--version prints the plugin's build on one line", []string{"--version"}, line},
		{"--version is the root's flag: a command refuses it", []string{"status", "--version"}, ""},
		{"the version command prints it as the client's", []string{"version"}, "Client: " + line},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := runArgs(t, Options{}, c.args...)
			if c.want == "" {
				// cobra's --version is the root's flag only: a
				// subcommand refuses it as unknown.
				if r.code() != 2 {
					t.Errorf("exit %d, err %v; want the usage error of an unknown flag", r.code(), r.err)
				}
				return
			}
			if r.err != nil || r.out != c.want {
				t.Errorf("printed %q, err %v; want %q", r.out, r.err, c.want)
			}
		})
	}

	t.Run("-o json has kubectl version's shape", func(t *testing.T) {
		r := runArgs(t, Options{}, "version", "-o", "json")
		var got struct {
			ClientVersion map[string]string `json:"clientVersion"`
		}
		if err := json.Unmarshal([]byte(r.out), &got); r.err != nil || err != nil {
			t.Fatalf("version -o json: %v; parsing %q: %v", r.err, r.out, err)
		}
		want := map[string]string{"version": build.Version, "revision": build.Revision, "goVersion": build.GoVersion}
		for k, v := range want {
			if got.ClientVersion[k] != v {
				t.Errorf("clientVersion.%s = %q, want %q (all: %v)", k, got.ClientVersion[k], v, got.ClientVersion)
			}
		}
	})

	t.Run("-v is not --version", func(t *testing.T) {
		if r := runArgs(t, Options{}, "-v"); r.code() != 2 {
			t.Errorf("-v: exit %d, out %q; want the usage error of an unknown flag (kubectl users read -v as verbosity)", r.code(), r.out)
		}
	})
}
