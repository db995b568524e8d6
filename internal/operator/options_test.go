package operator

import (
	"errors"
	"flag"
	"io"
	"strings"
	"testing"
)

func TestParseArgsNamesTheBadFlag(t *testing.T) {
	env := func(k string) string {
		if k == "POD_NAMESPACE" {
			return "tiercache-system"
		}
		return ""
	}
	cases := map[string]struct {
		args []string
		want string
	}{
		"an unknown cert mode":                        {[]string{"--cert-mode=vault"}, "--cert-mode"},
		"an unknown missing-tier policy":              {[]string{"--missing-tier=ignore"}, "--missing-tier"},
		"a TLS certificate without its key":           {[]string{"--xds-tls-cert-file=/c.pem"}, "--xds-tls-key-file"},
		"a webhook port out of range":                 {[]string{"--webhook-port=70000"}, "--webhook-port"},
		"a pull policy Kubernetes does not know":      {[]string{"--sidecar-image-pull-policy=Sometimes"}, "--sidecar-image-pull-policy"},
		"a status refresh of zero":                    {[]string{"--status-refresh=0s"}, "--status-refresh"},
		"an image allowlist of any image":             {[]string{"--allowed-sidecar-images=*"}, "--allowed-sidecar-images"},
		"a wildcard inside an allowed image":          {[]string{"--allowed-sidecar-images=reg/*/x"}, "--allowed-sidecar-images"},
		"a positional argument":                       {[]string{"extra"}, "unexpected arguments"},
		"no namespace from the flag or POD_NAMESPACE": {[]string{"--namespace="}, "--namespace"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := ParseArgs(tc.args, env, io.Discard)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want an error naming %s", err, tc.want)
			}
		})
	}

	o, err := ParseArgs([]string{"--excluded-namespaces= a, ,b", "--replica-name=r1"}, env, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.Namespace != "tiercache-system" || strings.Join(o.ExcludedNamespaces, ",") != "a,b" || o.ReplicaName != "r1" {
		t.Errorf("parsed %+v", o)
	}
	if got := o.excluded(); got[0] != "tiercache-system" {
		t.Errorf("the operator's own namespace is not excluded first: %v", got)
	}
	if _, err := ParseArgs([]string{"--help"}, env, io.Discard); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("--help: %v", err)
	}
}
