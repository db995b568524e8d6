package main

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func TestFlags(t *testing.T) {
	good := []string{"-o", "out.tar", "-name", "ghcr.io/tiercache/tiercache:1.2.3",
		"-platform", "linux/amd64=dir", "-file", "/tiercache-sidecar=tiercache-sidecar", "-entrypoint", "/tiercache-sidecar"}
	with := func(extra ...string) []string { return append(append([]string(nil), good...), extra...) }
	without := func(flag string) []string {
		var args []string
		for i := 0; i < len(good); i += 2 {
			if good[i] != flag {
				args = append(args, good[i], good[i+1])
			}
		}
		return args
	}
	for name, tc := range map[string]struct {
		args    []string
		env     map[string]string
		wantErr string
	}{
		"a full reference, a platform, a file and the entrypoint are enough": {args: good},
		"-bare is a flag without a value":                                    {args: append([]string{"-bare"}, good...)},
		"an output path is required":                                         {args: without("-o"), wantErr: "-o: required"},
		"a name is required":                                                 {args: without("-name"), wantErr: "-name: required"},
		"a platform is required":                                             {args: without("-platform"), wantErr: "-platform: at least one"},
		"a file is required":                                                 {args: without("-file"), wantErr: "-file: at least one"},
		"a name without a tag is refused":                                    {args: with("-name", "ghcr.io/tiercache/tiercache"), wantErr: "-name"},
		"a name without a registry is refused":                               {args: with("-name", "tiercache:1.2.3"), wantErr: "-name"},
		"a platform without an OS is refused":                                {args: with("-platform", "amd64=dir"), wantErr: "OS/ARCH=DIR"},
		"a platform without a directory is refused":                          {args: with("-platform", "linux/arm64"), wantErr: "OS/ARCH=DIR"},
		"a platform given twice is refused":                                  {args: with("-platform", "linux/amd64=other"), wantErr: "linux/amd64 given twice"},
		"a file below the root is refused":                                   {args: with("-file", "/usr/bin/x=x"), wantErr: "/NAME=FILE"},
		"a file's source with a path is refused":                             {args: with("-file", "/x=../x"), wantErr: "/NAME=FILE"},
		"a file on a base directory is refused":                              {args: with("-file", "/tmp=x"), wantErr: "directory of the base layer"},
		"a file given twice is refused":                                      {args: with("-file", "/tiercache-sidecar=other"), wantErr: "given twice"},
		"an entrypoint that is not a file is refused":                        {args: with("-entrypoint", "/bin/sh"), wantErr: "-entrypoint"},
		"a negative SOURCE_DATE_EPOCH is refused":                            {args: good, env: map[string]string{"SOURCE_DATE_EPOCH": "-1"}, wantErr: "SOURCE_DATE_EPOCH"},
		"a SOURCE_DATE_EPOCH that is a date is refused": {
			args: good, env: map[string]string{"SOURCE_DATE_EPOCH": "2026-01-01"}, wantErr: "SOURCE_DATE_EPOCH"},
		"arguments after the flags are refused": {args: with("extra"), wantErr: "unexpected arguments"},
	} {
		t.Run(name, func(t *testing.T) {
			var log bytes.Buffer
			_, _, err := parseFlags(tc.args, func(k string) string { return tc.env[k] }, &log)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
}

func TestSpecFromFlags(t *testing.T) {
	s, out, err := parseFlags([]string{"-o", "x.tar", "-name", "ghcr.io/tiercache/tiercache:1.2.3",
		"-platform", "linux/amd64=a", "-platform", "linux/arm64=b",
		"-file", "/z=z", "-file", "/a=a", "-entrypoint", "/z", "-arg=--listen=:8081", "-arg", "-v",
		"-source", "https://github.com/tiercache/tiercache"},
		func(k string) string { return map[string]string{"SOURCE_DATE_EPOCH": "1700000000"}[k] }, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if out != "x.tar" || s.ref.Name() != "ghcr.io/tiercache/tiercache:1.2.3" || s.entrypoint != "/z" {
		t.Errorf("out %q, name %q, entrypoint %q", out, s.ref.Name(), s.entrypoint)
	}
	if len(s.platforms) != 2 || s.platforms[0].String() != "linux/amd64" || s.platforms[1].dir != "b" {
		t.Errorf("platforms %v, want linux/amd64 from a, linux/arm64 from b, in that order", s.platforms)
	}
	if len(s.files) != 2 || s.files[0].dst != "/a" || s.files[1].dst != "/z" {
		t.Errorf("files %v, want /a then /z (sorted)", s.files)
	}
	if strings.Join(s.args, " ") != "--listen=:8081 -v" {
		t.Errorf("args %q", s.args)
	}
	if s.bare {
		t.Error("bare without -bare")
	}
	if !s.epoch.Equal(time.Unix(1700000000, 0)) {
		t.Errorf("epoch %v, want SOURCE_DATE_EPOCH's", s.epoch)
	}
	want := map[string]string{
		"org.opencontainers.image.version": "1.2.3",
		"org.opencontainers.image.created": "2023-11-14T22:13:20Z",
		"org.opencontainers.image.source":  "https://github.com/tiercache/tiercache",
	}
	for k, v := range want {
		if s.annotations[k] != v {
			t.Errorf("annotation %s = %q, want %q", k, s.annotations[k], v)
		}
	}
}

func TestNoSourceDateEpochIsZero(t *testing.T) {
	e, err := sourceDateEpoch("")
	if err != nil || e.Unix() != 0 {
		t.Fatalf("sourceDateEpoch(\"\") = %v, %v; want 1970-01-01", e, err)
	}
}
