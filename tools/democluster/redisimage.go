package main

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// The bundled Redis's image: the tool cache's redis-server and redis-cli
// from Debian (hack/ensure-redis.sh), with the shared libraries and the
// ELF interpreter they load, and /bin/sh for the entrypoint. No registry
// is reachable here, so the chart's docker.io/library/redis cannot be
// pulled; this image runs the chart's Redis container unchanged.
const (
	redisImageRepo = "tiercache.local/redis"
	redisImageTag  = "demo-1"
	// libDir is where the libraries go in the image; LD_LIBRARY_PATH
	// names it, so no ld.so.cache is needed.
	libDir = "/lib/redis"
)

// redisEntrypoint does what the official image's entrypoint does for
// the chart's `redis-server ...` arguments: it runs them with
// --protected-mode no, without which Redis refuses every client that is
// not on its loopback (there is no password: the bundled Redis is for
// trying Tiercache out).
var redisEntrypoint = []string{"/bin/sh", "-c", `exec "$@" --protected-mode no`, "redis"}

// buildRedisImage writes the image as an archive `ctr images import`
// reads, into dir, and returns its path. server and cli are the paths
// hack/ensure-redis.sh prints (wrappers that set LD_LIBRARY_PATH for the
// libraries the machine lacks).
func buildRedisImage(ctx context.Context, server, cli, dir string) (string, error) {
	files := map[string]string{} // path in the image -> file on the machine
	for dst, wrapper := range map[string]string{"/usr/bin/redis-server": server, "/usr/bin/redis-cli": cli} {
		bin, libPath, err := unwrap(wrapper)
		if err != nil {
			return "", err
		}
		files[dst] = bin
		if err := addLibs(ctx, files, bin, libPath); err != nil {
			return "", err
		}
	}
	sh, err := filepath.EvalSymlinks("/bin/sh")
	if err != nil {
		return "", err
	}
	files["/bin/sh"] = sh
	if err := addLibs(ctx, files, sh, ""); err != nil {
		return "", err
	}
	layer, err := tarLayer(files)
	if err != nil {
		return "", err
	}
	return writeImage(layer, filepath.Join(dir, "redis.tar"))
}

// unwrap reads a wrapper of hack/lib.sh's tc_install_deb (or takes a
// plain binary) and returns the real binary and the LD_LIBRARY_PATH
// directory the wrapper adds ("" for none).
func unwrap(p string) (bin, libPath string, err error) {
	b, err := os.ReadFile(p)
	if err != nil {
		return "", "", err
	}
	if !bytes.HasPrefix(b, []byte("#!")) {
		bin, err = filepath.EvalSymlinks(p)
		return bin, "", err
	}
	// The wrapper lives in <dir>/wrappers/; the binary is
	// <dir>/usr/bin/<name> and the libraries <dir>/deps/usr/lib/<triplet>.
	dir := filepath.Dir(filepath.Dir(p))
	bin, err = filepath.EvalSymlinks(filepath.Join(dir, "usr/bin", filepath.Base(p)))
	if err != nil {
		return "", "", fmt.Errorf("%s: the binary it wraps: %w", p, err)
	}
	libs, _ := filepath.Glob(filepath.Join(dir, "deps/usr/lib/*-linux-gnu"))
	if len(libs) == 1 {
		libPath = libs[0]
	}
	return bin, libPath, nil
}

// addLibs adds what ldd says bin loads: each library under libDir, the
// ELF interpreter at its own path.
func addLibs(ctx context.Context, files map[string]string, bin, libPath string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "ldd", bin)
	cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+libPath)
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("ldd %s: %w", bin, err)
	}
	libs, interp, err := parseLdd(string(out))
	if err != nil {
		return fmt.Errorf("ldd %s: %w", bin, err)
	}
	for _, l := range libs {
		real, err := filepath.EvalSymlinks(l)
		if err != nil {
			return err
		}
		files[path.Join(libDir, filepath.Base(l))] = real
	}
	real, err := filepath.EvalSymlinks(interp)
	if err != nil {
		return err
	}
	files[interp] = real
	return nil
}

// parseLdd reads ldd's output: the libraries' paths (by the name the
// binary asks for) and the interpreter's. A library not found is an
// error naming it.
func parseLdd(out string) (libs []string, interp string, err error) {
	for line := range strings.Lines(out) {
		f := strings.Fields(line)
		switch {
		case len(f) >= 3 && f[1] == "=>" && f[2] == "not":
			return nil, "", fmt.Errorf("%s: not found", f[0])
		case len(f) >= 3 && f[1] == "=>" && strings.HasPrefix(f[2], "/"):
			libs = append(libs, path.Join(path.Dir(f[2]), f[0]))
		case len(f) >= 1 && strings.HasPrefix(f[0], "/"):
			interp = f[0]
		}
	}
	if interp == "" {
		return nil, "", fmt.Errorf("no ELF interpreter in %q (a static binary?)", out)
	}
	return libs, interp, nil
}

// tarLayer packs files (path in the image -> file), sorted, with their
// parent directories, as root-owned entries with time 0.
func tarLayer(files map[string]string) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dirs := map[string]bool{}
	for _, dst := range slices.Sorted(maps.Keys(files)) {
		for d := path.Dir(dst); d != "/" && !dirs[d]; d = path.Dir(d) {
			dirs[d] = true
		}
	}
	for _, d := range slices.Sorted(maps.Keys(dirs)) {
		h := &tar.Header{Typeflag: tar.TypeDir, Name: strings.TrimPrefix(d, "/") + "/", Mode: 0o755, ModTime: time.Unix(0, 0)}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
	}
	for _, dst := range slices.Sorted(maps.Keys(files)) {
		b, err := os.ReadFile(files[dst])
		if err != nil {
			return nil, err
		}
		h := &tar.Header{Typeflag: tar.TypeReg, Name: strings.TrimPrefix(dst, "/"), Mode: 0o755, Size: int64(len(b)), ModTime: time.Unix(0, 0)}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(b); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// writeImage makes the one-layer image and writes it as a tarball.
func writeImage(layerTar []byte, out string) (string, error) {
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	})
	if err != nil {
		return "", err
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return "", err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return "", err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", runtime.GOARCH
	cf.Config.Entrypoint = redisEntrypoint
	cf.Config.Cmd = []string{"redis-server"}
	cf.Config.Env = []string{"PATH=/usr/bin:/bin", "LD_LIBRARY_PATH=" + libDir}
	cf.Config.WorkingDir = "/data"
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return "", err
	}
	tag, err := name.NewTag(redisImageRepo+":"+redisImageTag, name.StrictValidation)
	if err != nil {
		return "", err
	}
	if err := tarball.WriteToFile(out, tag, img); err != nil {
		return "", err
	}
	return out, nil
}
