package main

import (
	"archive/tar"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"sigs.k8s.io/yaml"
)

func TestParseLdd(t *testing.T) {
	for name, tc := range map[string]struct {
		out        string
		libs       []string
		interp     string
		errContain string
	}{
		"libraries by the name asked for, and the interpreter": {
			out: "\tlinux-vdso.so.1 (0x00007ffd)\n" +
				"\tliblzf.so.1 => /cache/deps/usr/lib/x86_64-linux-gnu/liblzf.so.1 (0x00007f)\n" +
				"\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f)\n" +
				"\t/lib64/ld-linux-x86-64.so.2 (0x00007f)\n",
			libs:   []string{"/cache/deps/usr/lib/x86_64-linux-gnu/liblzf.so.1", "/lib/x86_64-linux-gnu/libc.so.6"},
			interp: "/lib64/ld-linux-x86-64.so.2",
		},
		"a library not found is named": {
			out:        "\tlibjemalloc.so.2 => not found\n\t/lib64/ld-linux-x86-64.so.2 (0x1)\n",
			errContain: "libjemalloc.so.2: not found",
		},
		"a static binary has no interpreter": {
			out:        "\tnot a dynamic executable\n",
			errContain: "no ELF interpreter",
		},
	} {
		t.Run(name, func(t *testing.T) {
			libs, interp, err := parseLdd(tc.out)
			if tc.errContain != "" {
				if err == nil || !strings.Contains(err.Error(), tc.errContain) {
					t.Fatalf("err %v; want one containing %q", err, tc.errContain)
				}
				return
			}
			if err != nil || !slices.Equal(libs, tc.libs) || interp != tc.interp {
				t.Fatalf("got %q %q %v; want %q %q", libs, interp, err, tc.libs, tc.interp)
			}
		})
	}
}

func TestXCache(t *testing.T) {
	for name, tc := range map[string]struct{ response, want string }{
		"a miss":                     {"HTTP/1.1 200 OK\nX-Cache: MISS\n\nbody\n", "MISS"},
		"a hit from L2, lower case":  {"HTTP/1.1 200 OK\nx-cache: hit; layer=l2\n\n", "HIT"},
		"no header":                  {"HTTP/1.1 502 Bad Gateway\nContent-Length: 0\n\n", ""},
		"a body line is not read":    {"HTTP/1.1 200 OK\n\nX-Cache: HIT\n", ""},
		"the first of several words": {"HTTP/1.1 200 OK\nX-Cache: STALE, HIT\n\n", "STALE"},
	} {
		t.Run(name, func(t *testing.T) {
			if got := xCache(tc.response); got != tc.want {
				t.Fatalf("xCache = %q; want %q", got, tc.want)
			}
		})
	}
}

// TestManifestsAreKubernetesObjects: each document parses, names its
// kind, and the app's pod template carries the tier annotation and a
// port named http, which the Service targets by name.
func TestManifestsAreKubernetesObjects(t *testing.T) {
	docs := strings.Split(tierManifest()+"---\n"+appManifest("example.test/app:1"), "\n---\n")
	kinds := map[string]map[string]any{}
	for _, doc := range docs {
		var obj map[string]any
		if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
			t.Fatalf("%v in:\n%s", err, doc)
		}
		kind, _ := obj["kind"].(string)
		kinds[kind] = obj
	}
	for _, k := range []string{"CacheTier", "Deployment", "Service"} {
		if kinds[k] == nil {
			t.Fatalf("no %s among %v", k, docs)
		}
	}
	tmpl := kinds["Deployment"]["spec"].(map[string]any)["template"].(map[string]any)
	if ann := tmpl["metadata"].(map[string]any)["annotations"].(map[string]any); ann["tiercache.io/tier"] != tierName {
		t.Errorf("pod template annotations %v; want tiercache.io/tier: %s", ann, tierName)
	}
	port := kinds["Service"]["spec"].(map[string]any)["ports"].([]any)[0].(map[string]any)
	if port["targetPort"] != "http" {
		t.Errorf("the Service targets %v; want the port name http, which the sidecar takes over", port["targetPort"])
	}
}

// TestRedisImageRuns builds the bundled Redis's image from the tool
// cache's redis-server and runs its binaries, and its entrypoint, in a
// chroot of its only layer: every library and the interpreter are there.
func TestRedisImageRuns(t *testing.T) {
	server := os.Getenv("TIERCACHE_REDIS_SERVER")
	if server == "" {
		t.Skip("TIERCACHE_REDIS_SERVER is not set (export TIERCACHE_REDIS_SERVER=\"$(bash hack/ensure-redis.sh)\")")
	}
	if os.Geteuid() != 0 {
		t.Skip("chroot needs root")
	}
	cli := filepath.Join(filepath.Dir(server), "redis-cli")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	archive, err := buildRedisImage(ctx, server, cli, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	tag, err := name.NewTag(redisImageRepo + ":" + redisImageTag)
	if err != nil {
		t.Fatal(err)
	}
	img, err := tarball.ImageFromPath(archive, &tag)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(cf.Config.Entrypoint, redisEntrypoint) {
		t.Errorf("entrypoint %q; want %q", cf.Config.Entrypoint, redisEntrypoint)
	}
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("%d layers (%v); want 1", len(layers), err)
	}
	root := t.TempDir()
	untar(t, layers[0], root)
	env := append([]string{"PATH=/usr/bin:/bin"}, cf.Config.Env...)
	for _, args := range [][]string{
		{"/usr/bin/redis-server", "--version"},
		{"/usr/bin/redis-cli", "--version"},
		// The entrypoint (/bin/sh and its libraries) with the chart's
		// first argument.
		append(slices.Clone(redisEntrypoint), "redis-server", "--version"),
	} {
		cmd := exec.CommandContext(ctx, "chroot", append([]string{root}, args...)...)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "v=") && !strings.Contains(string(out), "redis-cli") {
			t.Errorf("chroot %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
}

func untar(t *testing.T, layer interface {
	Uncompressed() (io.ReadCloser, error)
}, root string) {
	t.Helper()
	rc, err := layer.Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(root, filepath.Clean("/"+h.Name))
		if h.Typeflag == tar.TypeDir {
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, os.FileMode(h.Mode)); err != nil {
			t.Fatal(err)
		}
	}
}
