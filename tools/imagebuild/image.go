package main

import (
	"bytes"
	"fmt"
	"io"
	"strconv"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// imageEnv is distroless/static's environment: a PATH, and the CA bundle
// named for programs that do not look in the usual places.
var imageEnv = []string{
	"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
	"SSL_CERT_FILE=/" + caBundlePath,
}

// bareEnv is a -bare image's: its commands are all at the root.
var bareEnv = []string{"PATH=/"}

// build returns the index that index.json is: one entry, named with the
// image reference, that is the platform's image manifest when there is
// one platform, else an image index of one manifest per platform.
func build(s spec) (v1.ImageIndex, error) {
	var base v1.Layer // none when bare
	if !s.bare {
		var err error
		if base, err = newLayer(baseEntries(), s); err != nil {
			return nil, fmt.Errorf("base layer: %w", err)
		}
	}
	var images []mutate.IndexAddendum
	for _, p := range s.platforms {
		img, err := buildImage(s, p, base)
		if err != nil {
			return nil, err
		}
		images = append(images, mutate.IndexAddendum{
			Add:        plainImage{img},
			Descriptor: v1.Descriptor{Platform: &v1.Platform{OS: p.os, Architecture: p.arch}},
		})
	}
	top := images[0]
	if len(images) > 1 {
		idx := mutate.AppendManifests(mutate.IndexMediaType(empty.Index, types.OCIImageIndex), images...)
		top = mutate.IndexAddendum{Add: mutate.Annotations(idx, s.annotations).(v1.ImageIndex)}
	}
	// containerd's importer (ctr images import, kind load) tags the
	// image with io.containerd.image.name; the OCI annotation holds the
	// tag alone, as the image-layout spec and BuildKit's exporter do.
	top.Annotations = map[string]string{
		"io.containerd.image.name":          s.ref.Name(),
		"org.opencontainers.image.ref.name": s.ref.TagStr(),
	}
	return mutate.AppendManifests(mutate.IndexMediaType(empty.Index, types.OCIImageIndex), top), nil
}

// plainImage is an image whose descriptor has no artifactType.
// go-containerregistry gives an image's the config's media type (image-spec
// 1.1 allows it; BuildKit and the Docker CLI write none), and copiers
// built on image-spec 1.0 drop the field and so rewrite the index under
// another digest (skopeo 1.9 copy --all; its --preserve-digests then
// refuses): without it, the index a release pushes keeps its digest
// through every tool.
type plainImage struct{ v1.Image }

func (plainImage) ArtifactType() (string, error) { return "", nil }

// buildImage is one platform's image: the base layer (unless bare), then
// its commands.
func buildImage(s spec, p platform, base v1.Layer) (v1.Image, error) {
	cmds, err := commandEntries(p, s.files)
	if err != nil {
		return nil, err
	}
	app, err := newLayer(cmds, s)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	created := v1.Time{Time: s.epoch}
	var dsts []string
	for _, f := range s.files {
		dsts = append(dsts, f.dst)
	}
	layers := []mutate.Addendum{{Layer: app, MediaType: types.OCILayer, History: v1.History{
		Created:   created,
		CreatedBy: "imagebuild: COPY " + strings.Join(dsts, " "),
	}}}
	cfg := &v1.ConfigFile{
		Created:      created,
		OS:           p.os,
		Architecture: p.arch,
		RootFS:       v1.RootFS{Type: "layers"},
		Config: v1.Config{
			User:       strconv.Itoa(nonroot) + ":" + strconv.Itoa(nonroot),
			Entrypoint: []string{s.entrypoint},
			Cmd:        s.args,
			Env:        imageEnv,
			WorkingDir: "/home/nonroot",
		},
	}
	if base != nil {
		layers = append([]mutate.Addendum{{Layer: base, MediaType: types.OCILayer, History: v1.History{
			Created:   created,
			CreatedBy: "imagebuild: base: /etc/passwd, /etc/group (nonroot 65532), /etc/nsswitch.conf, /" + caBundlePath + ", /home/nonroot, /tmp",
		}}}, layers...)
	} else {
		cfg.Config.User, cfg.Config.Env, cfg.Config.WorkingDir = "", bareEnv, ""
	}
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	if img, err = mutate.ConfigFile(img, cfg); err != nil {
		return nil, err
	}
	if img, err = mutate.Append(img, layers...); err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	return mutate.Annotations(img, s.annotations).(v1.Image), nil
}

// newLayer is a gzip-compressed OCI layer of entries; the compressed
// bytes are kept, so that the digest and the blob written come from one
// compression.
func newLayer(entries []entry, s spec) (v1.Layer, error) {
	raw, err := layerTar(entries, s.epoch)
	if err != nil {
		return nil, err
	}
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(raw)), nil
	}, tarball.WithMediaType(types.OCILayer), tarball.WithCompressedCaching)
}
