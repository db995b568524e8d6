package pods

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// buildRedisImage packs Debian's redis-server and redis-cli from the tool
// cache (hack/ensure-redis.sh; TIERCACHE_REDIS_SERVER is its wrapper,
// which sets LD_LIBRARY_PATH) as an image: the real binaries, every
// shared library they load (the cache's and this machine's), the ELF
// interpreter, and redisentry to start them (see its package comment).
// Not a redis-server installed on the machine: the one the project's
// scripts install, like every other test's.
func (s *suite) buildRedisImage(t *testing.T) string {
	t.Helper()
	wrapper := os.Getenv("TIERCACHE_REDIS_SERVER")
	if wrapper == "" {
		skipOrFail(t, "TIERCACHE_REDIS_SERVER is not set (make test-node sets it from hack/ensure-redis.sh)")
	}
	root := filepath.Dir(filepath.Dir(wrapper))
	libDirs, _ := filepath.Glob(filepath.Join(root, "deps", "usr", "lib", "*"))
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	files := map[string]string{
		"redis-server.bin": filepath.Join(root, "usr", "bin", "redis-server"),
		"redis-cli.bin":    filepath.Join(root, "usr", "bin", "redis-cli"),
	}
	for _, bin := range []string{files["redis-server.bin"], files["redis-cli.bin"]} {
		cmd := exec.CommandContext(ctx, "ldd", bin)
		cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+strings.Join(libDirs, ":"))
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("ldd %s: %v", bin, err)
		}
		sc := bufio.NewScanner(strings.NewReader(string(out)))
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			switch {
			case len(f) >= 3 && f[1] == "=>" && strings.HasPrefix(f[2], "/"):
				files[f[0]] = f[2]
			case len(f) >= 1 && strings.HasPrefix(f[0], "/"):
				files["ld.so"] = f[0]
			case len(f) >= 3 && f[1] == "=>" && f[2] == "not":
				t.Fatalf("ldd %s: %s", bin, sc.Text())
			}
		}
	}
	if files["ld.so"] == "" {
		t.Fatalf("ldd named no ELF interpreter for %s", files["redis-server.bin"])
	}
	entry := filepath.Join(t.TempDir(), "redisentry")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", entry, "./redisentry")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build redisentry: %v\n%s", err, out)
	}
	files["redisentry"], files["redis-cli"] = entry, entry
	return s.n.BuildHostImage(t, redisImage, files, "redisentry")
}
