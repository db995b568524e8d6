package operator

import (
	"errors"
	"flag"
	"io"
	"strings"
	"testing"
	"time"
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
		"an unknown cert mode":                             {[]string{"--cert-mode=vault"}, "--cert-mode"},
		"an unknown missing-tier policy":                   {[]string{"--missing-tier=ignore"}, "--missing-tier"},
		"a TLS certificate without its key":                {[]string{"--xds-tls-cert-file=/c.pem"}, "--xds-tls-key-file"},
		"a webhook port out of range":                      {[]string{"--webhook-port=70000"}, "--webhook-port"},
		"a pull policy Kubernetes does not know":           {[]string{"--sidecar-image-pull-policy=Sometimes"}, "--sidecar-image-pull-policy"},
		"a status refresh of zero":                         {[]string{"--status-refresh=0s"}, "--status-refresh"},
		"a positional argument":                            {[]string{"extra"}, "unexpected arguments"},
		"an unknown xds authentication":                    {[]string{"--xds-auth=mtls"}, "--xds-auth"},
		"token review without an audience":                 {[]string{"--xds-token-audience="}, "--xds-token-audience"},
		"a self-managed xds certificate without a Service": {[]string{"--xds-service="}, "--xds-service"},
		"an image allowlist of any image":                  {[]string{"--allowed-sidecar-images=*"}, "--allowed-sidecar-images"},
		"a wildcard inside an allowed image":               {[]string{"--allowed-sidecar-images=reg/*/x"}, "--allowed-sidecar-images"},
		"no namespace from the flag or POD_NAMESPACE":      {[]string{"--namespace="}, "--namespace"},
		"a sidecar uid of root":                            {[]string{"--sidecar-run-as-user=0"}, "--sidecar-run-as-user"},
		"a sidecar gid that is not a number":               {[]string{"--sidecar-run-as-group=staff"}, "sidecar-run-as-group"},
		"a sidecar drain delay above 5m":                   {[]string{"--sidecar-drain-delay=10m"}, "--sidecar-drain-delay"},
		"a shutdown delay above 5m":                        {[]string{"--shutdown-delay=6m"}, "--shutdown-delay: must be between 0s and 5m0s"},
		"a negative shutdown delay":                        {[]string{"--shutdown-delay=-1s"}, "--shutdown-delay"},
		"relay peers that are no label selector":           {[]string{"--relay-peers=a b"}, "--relay-peers"},
		"relay peers without a control plane":              {[]string{"--relay-peers=app=op", "--xds-listen="}, "--relay-peers: needs the control plane"},
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
	if !o.XDSTLS || o.XDSAuth != XDSAuthTokenReview || o.XDSTokenAudience != "tiercache-xds" {
		t.Errorf("xDS defaults: tls %v, auth %q, audience %q; want TLS and tokenreview for tiercache-xds", o.XDSTLS, o.XDSAuth, o.XDSTokenAudience)
	}
	if o.SidecarRunAsUser != nil || o.SidecarRunAsGroup != nil || o.SidecarDrainDelay != 5*time.Second {
		t.Errorf("sidecar defaults: uid %v, gid %v, drain delay %s; want no uid or gid and 5s", o.SidecarRunAsUser, o.SidecarRunAsGroup, o.SidecarDrainDelay)
	}
	o, err = ParseArgs([]string{"--sidecar-run-as-user=1000", "--sidecar-run-as-group=", "--sidecar-drain-delay=0s"}, env, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.SidecarRunAsUser == nil || *o.SidecarRunAsUser != 1000 || o.SidecarRunAsGroup != nil || o.SidecarDrainDelay != 0 {
		t.Errorf("sidecar flags: uid %v, gid %v, drain delay %s; want 1000, none, 0s", o.SidecarRunAsUser, o.SidecarRunAsGroup, o.SidecarDrainDelay)
	}
	if _, err := ParseArgs([]string{"--help"}, env, io.Discard); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("--help: %v", err)
	}
}

func TestXDSDNSNames(t *testing.T) {
	base := Options{Namespace: "tc", XDSListen: ":18000", XDSTLS: true, XDSService: "tc-xds"}
	cases := map[string]struct {
		edit func(*Options)
		want []string
	}{
		"the xDS Service's names": {
			edit: func(*Options) {},
			want: []string{"tc-xds.tc.svc", "tc-xds.tc.svc.cluster.local"},
		},
		"the host sidecars dial is added": {
			edit: func(o *Options) { o.ControlPlaneAddress = "xds.example.com:443" },
			want: []string{"tc-xds.tc.svc", "tc-xds.tc.svc.cluster.local", "xds.example.com"},
		},
		"the Service's own address is not repeated": {
			edit: func(o *Options) { o.ControlPlaneAddress = "tc-xds.tc.svc:18000" },
			want: []string{"tc-xds.tc.svc", "tc-xds.tc.svc.cluster.local"},
		},
		"an IP address is not a DNS name": {
			edit: func(o *Options) { o.ControlPlaneAddress = "10.0.0.1:18000" },
			want: []string{"tc-xds.tc.svc", "tc-xds.tc.svc.cluster.local"},
		},
		"plaintext xDS needs no name": {
			edit: func(o *Options) { o.XDSTLS = false },
			want: nil,
		},
		"no xDS needs no name": {
			edit: func(o *Options) { o.XDSListen = "" },
			want: nil,
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			o := base
			tc.edit(&o)
			if got := o.xdsDNSNames(); strings.Join(got, ",") != strings.Join(tc.want, ",") {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}
