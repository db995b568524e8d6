package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/version"
	"sigs.k8s.io/yaml"
)

// The plugin as krew lists it. The texts are what `kubectl krew info
// tiercache` shows.
const (
	pluginName       = "tiercache"
	manifestName     = pluginName + ".krew.yaml"
	homepage         = "https://github.com/tiercache/tiercache"
	shortDescription = "Purge, inspect and explain Tiercache HTTP caches"
	description      = `Day-2 commands for Tiercache, an HTTP caching sidecar for Kubernetes
that an operator injects into annotated pods:
  purge     drop or mark stale a CacheTier's entries by URL, path prefix,
            tag or all of them, on every pod of the tier
  status    per pod: the config version it runs, hit ratio and L2 state
  explain   which rule a URL falls under, its cache key and lifetimes
  version   the plugin's version, revision and Go version
`
	caveats = `Needs the Tiercache operator in the cluster (see the homepage).
Permissions: get on cachetiers, list on pods; for purge, get on the
tier's token Secret and create on pods/portforward; for status, get on
pods/proxy.
`
)

// The krew manifest's schema: sigs.k8s.io/krew's pkg/index types
// (Plugin, PluginSpec, Platform, FileOperation), written out here
// because that module pins k8s.io/client-go v11, which would displace
// ours.
const (
	krewAPIVersion = "krew.googlecontainertools.github.com/v1alpha2"
	krewKind       = "Plugin"
)

type krewPlugin struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Spec krewSpec `json:"spec"`
}

type krewSpec struct {
	Version          string         `json:"version"`
	Homepage         string         `json:"homepage,omitempty"`
	ShortDescription string         `json:"shortDescription"`
	Description      string         `json:"description,omitempty"`
	Caveats          string         `json:"caveats,omitempty"`
	Platforms        []krewPlatform `json:"platforms"`
}

type krewPlatform struct {
	Selector *metav1.LabelSelector `json:"selector"`
	URI      string                `json:"uri"`
	Sha256   string                `json:"sha256"`
	Files    []krewFile            `json:"files,omitempty"`
	Bin      string                `json:"bin"`
}

type krewFile struct {
	From string `json:"from"`
	To   string `json:"to"`
}

// pack writes every platform's archive and the manifest into c.out and
// returns the paths written.
func pack(c config) ([]string, error) {
	license, err := os.ReadFile(c.license)
	if err != nil {
		return nil, fmt.Errorf("-license: %w", err)
	}
	if err := os.MkdirAll(c.out, 0o755); err != nil {
		return nil, err
	}
	m := krewPlugin{APIVersion: krewAPIVersion, Kind: krewKind}
	m.Metadata.Name = pluginName
	m.Spec = krewSpec{
		Version:          "v" + c.version,
		Homepage:         homepage,
		ShortDescription: shortDescription,
		Description:      description,
		Caveats:          caveats,
	}
	var written []string
	for _, p := range c.platforms {
		bin, err := os.ReadFile(p.bin)
		if err != nil {
			return nil, fmt.Errorf("-platform %s: %w", p, err)
		}
		name := archiveName(c.version, p)
		out := filepath.Join(c.out, name)
		sum, err := writeArchive(out, []member{
			{name: "LICENSE", mode: 0o644, data: license},
			{name: binName, mode: 0o755, data: bin},
		}, c.epoch)
		if err != nil {
			return nil, err
		}
		written = append(written, out)
		m.Spec.Platforms = append(m.Spec.Platforms, krewPlatform{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"os": p.os, "arch": p.arch}},
			URI:      c.url + "/" + name,
			Sha256:   sum,
			Files:    []krewFile{{From: binName, To: "."}, {From: "LICENSE", To: "."}},
			Bin:      binName,
		})
	}
	b, err := yaml.Marshal(m)
	if err != nil {
		return nil, err
	}
	out := filepath.Join(c.out, manifestName)
	if err := os.WriteFile(out, b, 0o644); err != nil {
		return nil, err
	}
	return append(written, out), nil
}

var sha256Hex = regexp.MustCompile(`^[a-f0-9]{64}$`)

// readManifest reads a krew manifest strictly (no unknown fields) and
// checks it as krew's validation does (sigs.k8s.io/krew
// internal/index/validation, v0.4.3): apiVersion and kind, a safe name,
// a one-line short description, a "v"-prefixed semantic version, and
// platforms each with a uri, a sha256, a bin, files with both ends and
// a selector on os and arch only.
func readManifest(p string) (krewPlugin, error) {
	var m krewPlugin
	b, err := os.ReadFile(p)
	if err != nil {
		return m, err
	}
	if err := yaml.UnmarshalStrict(b, &m); err != nil {
		return m, err
	}
	switch {
	case m.APIVersion != krewAPIVersion:
		return m, fmt.Errorf("apiVersion %q, want %q", m.APIVersion, krewAPIVersion)
	case m.Kind != krewKind:
		return m, fmt.Errorf("kind %q, want %q", m.Kind, krewKind)
	case !regexp.MustCompile(`^[\w-]+$`).MatchString(m.Metadata.Name):
		return m, fmt.Errorf("metadata.name %q: not a safe plugin name", m.Metadata.Name)
	case m.Spec.ShortDescription == "" || strings.ContainsAny(m.Spec.ShortDescription, "\r\n"):
		return m, fmt.Errorf("spec.shortDescription %q: want one line", m.Spec.ShortDescription)
	case !strings.HasPrefix(m.Spec.Version, "v"):
		return m, fmt.Errorf("spec.version %q: krew wants a leading v", m.Spec.Version)
	case len(m.Spec.Platforms) == 0:
		return m, fmt.Errorf("spec.platforms: none")
	}
	if _, err := version.ParseSemantic(m.Spec.Version); err != nil {
		return m, fmt.Errorf("spec.version %q: %w", m.Spec.Version, err)
	}
	for i, pl := range m.Spec.Platforms {
		if err := validatePlatform(pl); err != nil {
			return m, fmt.Errorf("spec.platforms[%d]: %w", i, err)
		}
	}
	return m, nil
}

func validatePlatform(pl krewPlatform) error {
	switch {
	case pl.URI == "":
		return fmt.Errorf("uri: required")
	case !sha256Hex.MatchString(pl.Sha256):
		return fmt.Errorf("sha256 %q: want 64 lower-case hex digits", pl.Sha256)
	case pl.Bin == "":
		return fmt.Errorf("bin: required")
	case pl.Selector == nil || (len(pl.Selector.MatchLabels) == 0 && len(pl.Selector.MatchExpressions) == 0):
		return fmt.Errorf("selector: required, on os and arch")
	}
	for _, f := range pl.Files {
		if f.From == "" || f.To == "" {
			return fmt.Errorf("files: %+v: from and to are required", f)
		}
	}
	for k := range pl.Selector.MatchLabels {
		if k != "os" && k != "arch" {
			return fmt.Errorf("selector: key %q: krew selects on os and arch only", k)
		}
	}
	for _, e := range pl.Selector.MatchExpressions {
		if e.Key != "os" && e.Key != "arch" {
			return fmt.Errorf("selector: key %q: krew selects on os and arch only", e.Key)
		}
	}
	return nil
}
