package main

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"time"
)

func TestALayerIsSortedAndTakesNothingFromTheMachine(t *testing.T) {
	mtime := time.Unix(1700000000, 0)
	raw, err := layerTar([]entry{
		{name: "tmp/", mode: 0o1777},
		{name: "b", mode: 0o755, data: []byte("b")},
		{name: "a/", mode: 0o755},
		{name: "a/x", mode: 0o644, uid: nonroot, gid: nonroot, data: []byte("x")},
	}, mtime)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(bytes.NewReader(raw))
	var names []string
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
		if !h.ModTime.Equal(mtime) || h.Uname != "" || h.Gname != "" || len(h.PAXRecords) > 0 || h.Format != tar.FormatUSTAR {
			t.Errorf("%s: mtime %v, owner %q:%q, PAX %v, format %v: want the epoch, no names, plain USTAR",
				h.Name, h.ModTime, h.Uname, h.Gname, h.PAXRecords, h.Format)
		}
		if h.Name == "tmp/" && (h.Typeflag != tar.TypeDir || h.Mode != 0o1777) {
			t.Errorf("tmp/: type %c mode %o, want a sticky world-writable directory", h.Typeflag, h.Mode)
		}
	}
	if got := strings.Join(names, " "); got != "a/ a/x b tmp/" {
		t.Errorf("entries %q, want sorted by name", got)
	}
}

func TestALayerRefusesAPathTwice(t *testing.T) {
	_, err := layerTar([]entry{{name: "x", mode: 0o644}, {name: "x", mode: 0o755}}, time.Unix(0, 0))
	if err == nil || !strings.Contains(err.Error(), "twice") {
		t.Fatalf("error %v, want one saying x is there twice", err)
	}
}
