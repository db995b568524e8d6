package main

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestTheSameInputsGiveTheSameArchive builds one image twice, at different
// times and from files with different times, and wants the same bytes.
func TestTheSameInputsGiveTheSameArchive(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "app")
	if err := os.WriteFile(bin, []byte("#!/bin/true\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	var archives [][]byte
	for i, out := range []string{"a.tar", "b.tar"} {
		if i == 1 {
			if err := os.Chtimes(bin, bin0Time, bin0Time); err != nil {
				t.Fatal(err)
			}
		}
		args := []string{"-o", filepath.Join(dir, out), "-name", "tiercache.local/app:1", "-file", bin + ":/bin/app", "-entrypoint", "/bin/app"}
		if err := run(context.Background(), args, io.Discard); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(filepath.Join(dir, out))
		if err != nil {
			t.Fatal(err)
		}
		archives = append(archives, b)
	}
	if !bytes.Equal(archives[0], archives[1]) {
		t.Fatal("two builds of the same inputs differ")
	}
}

// TestTheArchiveNamesItsImageForCtr: ctr images import tags an OCI
// archive from its index's io.containerd.image.name annotation; the image
// has the entrypoint and the file at its place.
func TestTheArchiveNamesItsImageForCtr(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "app")
	if err := os.WriteFile(bin, []byte("binary"), 0o755); err != nil {
		t.Fatal(err)
	}
	spec := imageSpec{out: filepath.Join(dir, "app.tar"), name: "tiercache.local/app:1", entrypoint: "/bin/app", files: []imageFile{{src: bin, dst: "/bin/app"}}}
	if err := spec.validate(); err != nil {
		t.Fatal(err)
	}
	img, err := spec.image()
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if got := cf.Config.Entrypoint; len(got) != 1 || got[0] != "/bin/app" || cf.OS != "linux" || cf.Architecture != "amd64" {
		t.Fatalf("config: entrypoint %v, %s/%s", got, cf.OS, cf.Architecture)
	}
	if err := spec.write(); err != nil {
		t.Fatal(err)
	}
	index := readTarFile(t, spec.out, "index.json")
	var idx struct {
		Manifests []struct {
			Annotations map[string]string `json:"annotations"`
		} `json:"manifests"`
	}
	if err := json.Unmarshal(index, &idx); err != nil {
		t.Fatal(err)
	}
	if len(idx.Manifests) != 1 || idx.Manifests[0].Annotations["io.containerd.image.name"] != "tiercache.local/app:1" {
		t.Fatalf("index.json: %s", index)
	}
}

func TestABadSpecIsRefusedNamingTheFlag(t *testing.T) {
	for name, args := range map[string][]string{
		"no output":             {"-name", "x.local/a:1", "-file", "a:/a", "-entrypoint", "/a"},
		"a relative entrypoint": {"-o", "a.tar", "-name", "x.local/a:1", "-file", "a:/a", "-entrypoint", "a"},
		"a relative target":     {"-o", "a.tar", "-name", "x.local/a:1", "-file", "a:a", "-entrypoint", "/a"},
		"no file":               {"-o", "a.tar", "-name", "x.local/a:1", "-entrypoint", "/a"},
	} {
		t.Run(name, func(t *testing.T) {
			if err := run(context.Background(), args, io.Discard); err == nil {
				t.Fatal("accepted")
			}
		})
	}
}

// bin0Time is another time for the input file: it must not show.
var bin0Time = time.Unix(1e9, 0)

func readTarFile(t *testing.T, archive, name string) []byte {
	t.Helper()
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for range 1000 {
		h, err := tr.Next()
		if err != nil {
			t.Fatalf("%s: no %s: %v", archive, name, err)
		}
		if h.Name == name {
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			return b
		}
	}
	t.Fatalf("%s: no %s in its first 1000 entries", archive, name)
	return nil
}
