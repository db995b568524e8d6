package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var allPlatforms = []string{"linux/amd64", "linux/arm64", "darwin/amd64", "darwin/arm64"}

const testURL = "https://github.com/tiercache/tiercache/releases/download/v1.2.3"

// packTest packs a stand-in binary per platform (its bytes name the
// platform) and returns the output directory.
func packTest(t *testing.T, epoch string) string {
	t.Helper()
	in, out := t.TempDir(), t.TempDir()
	license := filepath.Join(in, "LICENSE")
	if err := os.WriteFile(license, []byte("Apache License\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{"-o", out, "-version", "1.2.3", "-url", testURL + "/", "-license", license}
	for _, p := range allPlatforms {
		bin := filepath.Join(in, strings.ReplaceAll(p, "/", "-"))
		if err := os.WriteFile(bin, []byte("binary for "+p), 0o755); err != nil {
			t.Fatal(err)
		}
		args = append(args, "-platform", p+"="+bin)
	}
	var log bytes.Buffer
	env := map[string]string{"SOURCE_DATE_EPOCH": epoch}
	if err := run(args, func(k string) string { return env[k] }, &log); err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	return out
}

type archiveFile struct {
	hdr  tar.Header
	data string
}

// untarGz reads every entry of a tar.gz, in order.
func untarGz(t *testing.T, p string) []archiveFile {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	if zr.Name != "" || !zr.ModTime.IsZero() {
		t.Errorf("%s: gzip header name %q time %v, want neither", p, zr.Name, zr.ModTime)
	}
	tr := tar.NewReader(zr)
	var files []archiveFile
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, archiveFile{*h, string(b)})
	}
}

// TestPackWritesArchivesAndTheirManifest: one archive per platform with
// the LICENSE and the binary, owned by root at SOURCE_DATE_EPOCH, and a
// manifest whose platform for each names that archive's URL and sha256
// and is the only one selecting it; the manifest checks.
func TestPackWritesArchivesAndTheirManifest(t *testing.T) {
	out := packTest(t, "1700000000")
	m, err := readManifest(filepath.Join(out, manifestName))
	if err != nil {
		t.Fatal(err)
	}
	if m.Metadata.Name != "tiercache" || m.Spec.Version != "v1.2.3" || m.Spec.Homepage != homepage {
		t.Errorf("name %q version %q homepage %q", m.Metadata.Name, m.Spec.Version, m.Spec.Homepage)
	}
	if len(m.Spec.Platforms) != len(allPlatforms) {
		t.Fatalf("%d platforms, want %d", len(m.Spec.Platforms), len(allPlatforms))
	}
	for _, p := range allPlatforms {
		goos, arch, _ := strings.Cut(p, "/")
		name := "kubectl-tiercache_1.2.3_" + goos + "_" + arch + ".tar.gz"
		var pl *krewPlatform
		for i := range m.Spec.Platforms {
			if ok, err := selects(m.Spec.Platforms[i].Selector, goos, arch); err != nil || !ok {
				continue
			}
			if pl != nil {
				t.Fatalf("%s selected twice", p)
			}
			pl = &m.Spec.Platforms[i]
		}
		if pl == nil {
			t.Fatalf("%s: no platform selects it", p)
		}
		if pl.URI != testURL+"/"+name || pl.Bin != "kubectl-tiercache" {
			t.Errorf("%s: uri %q bin %q", p, pl.URI, pl.Bin)
		}
		b, err := os.ReadFile(filepath.Join(out, name))
		if err != nil {
			t.Fatal(err)
		}
		if sum := sha256.Sum256(b); hex.EncodeToString(sum[:]) != pl.Sha256 {
			t.Errorf("%s: sha256 %x, manifest %s", name, sum, pl.Sha256)
		}
		files := untarGz(t, filepath.Join(out, name))
		want := []struct {
			name, data string
			mode       int64
		}{{"LICENSE", "Apache License\n", 0o644}, {"kubectl-tiercache", "binary for " + p, 0o755}}
		if len(files) != len(want) {
			t.Fatalf("%s: %d entries, want %d", name, len(files), len(want))
		}
		for i, w := range want {
			h := files[i].hdr
			if h.Name != w.name || files[i].data != w.data || h.Mode != w.mode || h.Typeflag != tar.TypeReg {
				t.Errorf("%s: entry %d: %s mode %o %q, want %s mode %o %q", name, i, h.Name, h.Mode, files[i].data, w.name, w.mode, w.data)
			}
			if h.Uid != 0 || h.Gid != 0 || h.Uname != "" || h.Gname != "" || !h.ModTime.Equal(time.Unix(1700000000, 0)) {
				t.Errorf("%s: %s owned %d:%d (%q:%q) at %v, want 0:0 without names at SOURCE_DATE_EPOCH", name, h.Name, h.Uid, h.Gid, h.Uname, h.Gname, h.ModTime)
			}
		}
	}
	if err := check(filepath.Join(out, manifestName), allPlatforms); err != nil {
		t.Errorf("check: %v", err)
	}
}

// TestPackIsReproducible: the same binaries and SOURCE_DATE_EPOCH give
// the same bytes; another epoch another archive.
func TestPackIsReproducible(t *testing.T) {
	a, b, c := packTest(t, ""), packTest(t, ""), packTest(t, "1")
	entries, err := os.ReadDir(a)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != len(allPlatforms)+1 {
		t.Fatalf("%d files written, want %d archives and the manifest", len(entries), len(allPlatforms))
	}
	read := func(dir, name string) []byte {
		t.Helper()
		x, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		return x
	}
	for _, e := range entries {
		if !bytes.Equal(read(a, e.Name()), read(b, e.Name())) {
			t.Errorf("%s: two packs of the same binaries differ", e.Name())
		}
		if strings.HasSuffix(e.Name(), ".tar.gz") && bytes.Equal(read(a, e.Name()), read(c, e.Name())) {
			t.Errorf("%s: SOURCE_DATE_EPOCH changed nothing", e.Name())
		}
	}
}

// TestCheckFindsWhatKrewWouldRefuse: each way a manifest and its
// archives can disagree, or krew would refuse the manifest, fails the
// check, naming what is wrong.
func TestCheckFindsWhatKrewWouldRefuse(t *testing.T) {
	linuxAMD64 := "kubectl-tiercache_1.2.3_linux_amd64.tar.gz"
	for name, tc := range map[string]struct {
		edit    func(t *testing.T, dir string, manifest string) string // returns the new manifest
		want    []string
		wantErr string
	}{
		"an archive changed after the manifest was written": {
			edit: func(t *testing.T, dir, m string) string {
				if err := os.WriteFile(filepath.Join(dir, linuxAMD64), []byte("other"), 0o644); err != nil {
					t.Fatal(err)
				}
				return m
			},
			wantErr: "sha256",
		},
		"an archive missing": {
			edit: func(t *testing.T, dir, m string) string {
				if err := os.Remove(filepath.Join(dir, linuxAMD64)); err != nil {
					t.Fatal(err)
				}
				return m
			},
			wantErr: "no such file",
		},
		"a platform the release must have that no archive serves": {
			want: append([]string{"windows/amd64"}, allPlatforms...), wantErr: "windows/amd64 is selected by 0 platforms",
		},
		"a platform nobody asked for": {
			want: allPlatforms[:3], wantErr: "selects none of",
		},
		"a platform selected twice": {
			edit: func(t *testing.T, dir, m string) string {
				return strings.Replace(m, "os: darwin", "os: linux", 1)
			},
			wantErr: "selected by 2 platforms",
		},
		"bin naming the LICENSE, which is not executable": {
			edit: func(t *testing.T, dir, m string) string {
				return strings.Replace(m, "bin: kubectl-tiercache", "bin: LICENSE", 1)
			},
			wantErr: "not an executable file",
		},
		"bin not among the files installed": {
			edit: func(t *testing.T, dir, m string) string {
				return strings.Replace(m, "bin: kubectl-tiercache", "bin: kubectl-other", 1)
			},
			wantErr: "is not installed",
		},
		"a version without its leading v": {
			edit: func(t *testing.T, dir, m string) string {
				return strings.Replace(m, "version: v1.2.3", "version: 1.2.3", 1)
			},
			wantErr: "leading v",
		},
		"an apiVersion krew does not read": {
			edit: func(t *testing.T, dir, m string) string {
				return strings.Replace(m, "/v1alpha2", "/v1alpha1", 1)
			},
			wantErr: "apiVersion",
		},
		"a selector on another label": {
			edit:    func(t *testing.T, dir, m string) string { return strings.Replace(m, "os: darwin", "osname: darwin", 1) },
			wantErr: `key "osname"`,
		},
		"an unknown field": {
			edit:    func(t *testing.T, dir, m string) string { return strings.Replace(m, "bin:", "binary: x\n    bin:", 1) },
			wantErr: "unknown field",
		},
		"a uri that is not https": {
			edit:    func(t *testing.T, dir, m string) string { return strings.ReplaceAll(m, "https://", "http://") },
			wantErr: "https URL",
		},
	} {
		t.Run(name, func(t *testing.T) {
			dir := packTest(t, "")
			p := filepath.Join(dir, manifestName)
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			m := string(b)
			if tc.edit != nil {
				if m2 := tc.edit(t, dir, m); m2 != m {
					if err := os.WriteFile(p, []byte(m2), 0o644); err != nil {
						t.Fatal(err)
					}
				}
			}
			want := tc.want
			if want == nil {
				want = allPlatforms
			}
			err = check(p, want)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("check: %v, want an error containing %q", err, tc.wantErr)
			}
		})
	}
}
