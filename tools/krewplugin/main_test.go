package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestFlags(t *testing.T) {
	good := []string{"-o", "out", "-version", "1.2.3", "-url", "https://example.com/v1.2.3",
		"-license", "LICENSE", "-platform", "linux/amd64=bin/kubectl-tiercache"}
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
		"an output, a version, a url, a license and a platform are enough": {args: good},
		"a pre-release with git describe's suffix is a semantic version":   {args: with("-version", "0.1.0-3-gabc1234-dirty")},
		"-check takes platforms without binaries":                          {args: []string{"-check", "m.yaml", "-platform", "linux/amd64", "-platform", "darwin/arm64"}},
		"an output directory is required":                                  {args: without("-o"), wantErr: "-o: required"},
		"a version is required":                                            {args: without("-version"), wantErr: "-version: required"},
		"a url is required":                                                {args: without("-url"), wantErr: "-url: required"},
		"a license is required":                                            {args: without("-license"), wantErr: "-license: required"},
		"a platform is required":                                           {args: without("-platform"), wantErr: "-platform: at least one"},
		"a version with a leading v is refused (the manifest adds it)":     {args: with("-version", "v1.2.3"), wantErr: "without the leading v"},
		"a commit hash is not a version":                                   {args: with("-version", "abc1234"), wantErr: "not a semantic version"},
		"a version without a patch number is refused":                      {args: with("-version", "1.2"), wantErr: "not a semantic version"},
		"a platform without a binary is refused when packing":              {args: with("-platform", "darwin/arm64"), wantErr: "the binary is required"},
		"a platform without an OS is refused":                              {args: with("-platform", "amd64=x"), wantErr: "OS/ARCH=BINARY"},
		"a platform with an empty binary is refused":                       {args: with("-platform", "darwin/arm64="), wantErr: "OS/ARCH=BINARY"},
		"a platform given twice is refused":                                {args: with("-platform", "linux/amd64=other"), wantErr: "linux/amd64 given twice"},
		"-check refuses platforms with binaries": {
			args: []string{"-check", "m.yaml", "-platform", "linux/amd64=x"}, wantErr: "OS/ARCH only"},
		"a negative SOURCE_DATE_EPOCH is refused": {args: good, env: map[string]string{"SOURCE_DATE_EPOCH": "-1"}, wantErr: "SOURCE_DATE_EPOCH"},
		"arguments after the flags are refused":   {args: with("extra"), wantErr: "unexpected arguments"},
	} {
		t.Run(name, func(t *testing.T) {
			var log bytes.Buffer
			_, err := parseFlags(tc.args, func(k string) string { return tc.env[k] }, &log)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
}
