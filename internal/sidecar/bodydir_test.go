package sidecar

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestBodyDirFlags(t *testing.T) {
	tests := map[string]struct {
		args     []string
		env      map[string]string
		dir      string
		size     int64
		errNames string // "" = no error
	}{
		"no body dir is the default": {},
		"a body dir without a size is automatic (0)": {
			args: []string{"--body-dir", "/var/cache/b"}, dir: "/var/cache/b",
		},
		"a size is a quantity": {
			args: []string{"--body-dir", "/b", "--body-dir-size", "2Gi"}, dir: "/b", size: 2 << 30,
		},
		"a decimal size is plain bytes": {
			args: []string{"--body-dir", "/b", "--body-dir-size", "1.5G"}, dir: "/b", size: 1_500_000_000,
		},
		"an explicit 0 is automatic": {
			args: []string{"--body-dir", "/b", "--body-dir-size", "0"}, dir: "/b",
		},
		"both come from the environment": {
			env: map[string]string{"TIERCACHE_BODY_DIR": "/e", "TIERCACHE_BODY_DIR_SIZE": "64Mi"}, dir: "/e", size: 64 << 20,
		},
		"the command line wins over the environment": {
			args: []string{"--body-dir-size", "128Mi"},
			env:  map[string]string{"TIERCACHE_BODY_DIR": "/e", "TIERCACHE_BODY_DIR_SIZE": "64Mi"}, dir: "/e", size: 128 << 20,
		},
		"a malformed size names the flag": {
			args: []string{"--body-dir", "/b", "--body-dir-size", "lots"}, errNames: `--body-dir-size (or TIERCACHE_BODY_DIR_SIZE): invalid size "lots"`,
		},
		"a malformed size from the environment names the variable": {
			env: map[string]string{"TIERCACHE_BODY_DIR": "/e", "TIERCACHE_BODY_DIR_SIZE": "-1Gi"}, errNames: "TIERCACHE_BODY_DIR_SIZE",
		},
		"a size below 1Mi is refused": {
			args: []string{"--body-dir", "/b", "--body-dir-size", "512Ki"}, errNames: "--body-dir-size (or TIERCACHE_BODY_DIR_SIZE): must be 0 (automatic) or at least 1Mi (got 512Ki)",
		},
		"a size without a directory is refused": {
			args: []string{"--body-dir-size", "1Gi"}, errNames: "--body-dir-size (or TIERCACHE_BODY_DIR_SIZE) needs --body-dir",
		},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			args := append([]string{"--upstream", "http://127.0.0.1:1"}, tt.args...)
			o, err := ParseArgs(args, func(k string) string { return tt.env[k] }, io.Discard)
			if tt.errNames != "" {
				if err == nil || !strings.Contains(err.Error(), tt.errNames) {
					t.Fatalf("err = %v, want it to contain %q", err, tt.errNames)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if o.BodyDir != tt.dir || o.BodyDirSize != tt.size {
				t.Fatalf("BodyDir %q, BodyDirSize %d; want %q, %d", o.BodyDir, o.BodyDirSize, tt.dir, tt.size)
			}
		})
	}
}

func TestPrepareBodyDir(t *testing.T) {
	noStatfs := func(string) (int64, error) { return 0, errors.New("statfs must not be called with a size") }
	free := func(n int64, err error) func(string) (int64, error) {
		return func(string) (int64, error) { return n, err }
	}
	tests := map[string]struct {
		dir      func(t *testing.T) string
		size     int64
		free     func(string) (int64, error)
		want     int64
		errNames []string // besides --body-dir and the path
	}{
		"a missing directory is made": {
			dir:  func(t *testing.T) string { return filepath.Join(t.TempDir(), "a", "bodies") },
			size: 64 << 20, free: noStatfs, want: 64 << 20,
		},
		"an existing directory is used": {
			dir:  func(t *testing.T) string { return t.TempDir() },
			size: 1 << 30, free: noStatfs, want: 1 << 30,
		},
		"no size is 90% of the free space, in whole Ki": {
			dir:  func(t *testing.T) string { return t.TempDir() },
			free: free(10<<30, nil), want: 9 << 30,
		},
		"a path under a regular file is refused": {
			dir: func(t *testing.T) string {
				f := filepath.Join(t.TempDir(), "file")
				if err := os.WriteFile(f, nil, 0o600); err != nil {
					t.Fatal(err)
				}
				return filepath.Join(f, "bodies")
			},
			size: 1 << 30, free: noStatfs, errNames: []string{"cannot create the directory", "not a directory"},
		},
		"a regular file is refused": {
			dir: func(t *testing.T) string {
				f := filepath.Join(t.TempDir(), "file")
				if err := os.WriteFile(f, nil, 0o600); err != nil {
					t.Fatal(err)
				}
				return f
			},
			size: 1 << 30, free: noStatfs, errNames: []string{"not a directory"},
		},
		"an unknown free space without a size is refused": {
			dir:  func(t *testing.T) string { return t.TempDir() },
			free: free(0, errors.New("statfs broke")), errNames: []string{"automatic --body-dir-size", "statfs broke"},
		},
		"a full filesystem without a size is refused": {
			dir:  func(t *testing.T) string { return t.TempDir() },
			free: free(100<<10, nil), errNames: []string{"only 100Ki free", "give --body-dir-size"},
		},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			dir := tt.dir(t)
			got, err := prepareBodyDir(dir, tt.size, tt.free)
			if tt.errNames != nil {
				if err == nil {
					t.Fatalf("prepareBodyDir(%s) = %d, want an error", dir, got)
				}
				for _, want := range append([]string{"--body-dir " + dir + ":"}, tt.errNames...) {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("error %q does not contain %q", err, want)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Fatalf("size %d, want %d", got, tt.want)
			}
			fi, err := os.Stat(dir)
			if err != nil || !fi.IsDir() {
				t.Fatalf("%s: %v, want a directory", dir, err)
			}
			if entries, _ := os.ReadDir(dir); len(entries) != 0 {
				t.Fatalf("the probe was left behind: %v", entries)
			}
		})
	}
}

func TestAMadeBodyDirIsPrivate(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "bodies")
	if _, err := prepareBodyDir(dir, 1<<30, nil); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	// The umask may only remove bits.
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		t.Fatalf("mode %v, want 0700", perm)
	}
}

func TestAutomaticBodyDirSizeIsNinetyPercentOfTheRealFreeSpace(t *testing.T) {
	dir := t.TempDir()
	before, err := freeBytes(dir)
	if err != nil {
		t.Fatal(err)
	}
	got, err := prepareBodyDir(dir, 0, freeBytes)
	if err != nil {
		t.Fatal(err)
	}
	after, err := freeBytes(dir)
	if err != nil {
		t.Fatal(err)
	}
	// Others write on this filesystem too: allow 64Mi of drift.
	lo, hi := min(before, after)-64<<20, max(before, after)+64<<20
	if float64(got) < 0.9*float64(lo) || float64(got) > 0.9*float64(hi) {
		t.Fatalf("automatic size %d, want 90%% of the free space (%d..%d)", got, before, after)
	}
}

func TestAutoBodyDirSize(t *testing.T) {
	tests := map[string]struct{ avail, want int64 }{
		"nothing free is nothing":               {0, 0},
		"a negative free space is nothing":      {-5, 0},
		"90% is rounded down to whole Ki":       {10 << 20, 9437184},
		"huge filesystems do not overflow":      {1 << 62, (1 << 62) / 10 * 9 &^ 1023},
		"an odd free space rounds down, not up": {1<<20 + 7, (1<<20 + 7) * 9 / 10 &^ 1023},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			if got := autoBodyDirSize(tt.avail); got != tt.want {
				t.Fatalf("autoBodyDirSize(%d) = %d, want %d", tt.avail, got, tt.want)
			}
		})
	}
}

func TestRunRefusesAnUnwritableBodyDirNamingTheFlag(t *testing.T) {
	// Tests run as root, for whom a mode of 0500 stops nothing: a path
	// under a regular file cannot be a directory for anyone.
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(file, "bodies")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	started := false
	err := RunWith(ctx, []string{"--upstream", "http://127.0.0.1:1", "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0",
		"--memory-limit", "0", "--body-dir", dir}, noEnv, io.Discard, func(Addrs) { started = true; cancel() })
	if started || err == nil {
		t.Fatalf("the sidecar started (err %v) with an unusable --body-dir", err)
	}
	for _, want := range []string{"--body-dir", dir, "not a directory"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
}

func TestRunStartsWithABodyDir(t *testing.T) {
	origin := newOrigin(t, 0)
	dir := filepath.Join(t.TempDir(), "bodies")
	s := start(t, origin.URL, "--body-dir", dir, "--body-dir-size", "64Mi")
	defer s.stop(t)
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		t.Fatalf("--body-dir %s: %v, want it made", dir, err)
	}
	if resp, body := s.get(t, "http://"+s.addrs.Serve+"/a"); resp.StatusCode != 200 || !strings.HasPrefix(body, "/a v1") {
		t.Fatalf("GET /a through the sidecar: %d %q", resp.StatusCode, body)
	}
}

// lockedBuffer is an io.Writer the sidecar's goroutines may log into while
// the test reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func TestABodyDirSizeAboveTheFreeSpaceIsLogged(t *testing.T) {
	origin := newOrigin(t, 0)
	var logs lockedBuffer
	dir := t.TempDir()
	s := startLogging(t, &logs, origin.URL, "--log-level", "info", "--body-dir", dir, "--body-dir-size", "4096Ti")
	s.stop(t)
	out := logs.String()
	for _, want := range []string{`"msg":"body directory ready"`, `"size":"4096Ti"`, "--body-dir-size is more than the free space"} {
		if !strings.Contains(out, want) {
			t.Errorf("the log lacks %s:\n%s", want, out)
		}
	}
}
