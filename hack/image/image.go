package main

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Defaults shared with the Helm chart (charts/bulkd/values.yaml: image.repository)
// and the kustomize config (config/default: images); image_test.go checks they agree.
const (
	DefaultRepository = "localhost/bulkd"
	DefaultSource     = "https://github.com/bulkd/bulkd"
	DefaultCACerts    = "/etc/ssl/certs/ca-certificates.crt"

	// BinaryPath is where the binary lives in the image; it is the entrypoint.
	BinaryPath = "/usr/local/bin/bulkd"
	// NonRootUID is the user (and group) the image runs as, as in distroless'
	// "nonroot".
	NonRootUID = 65532
)

// Options describe one image build.
type Options struct {
	Binary     string   // static linux binary
	Repository string   // e.g. localhost/bulkd
	Tags       []string // e.g. 0.1.0, latest
	Version    string
	Commit     string
	Source     string
	Platform   string    // os/arch[/variant]
	CACerts    string    // CA bundle to copy in when present; "" for none
	Created    time.Time // every timestamp; zero means the Unix epoch
	TarPath    string    // archive to write; "" for none
	LayoutPath string    // OCI layout directory to write; "" for none
	// AllowDynamic accepts a dynamically linked binary (tests only: the
	// image has no libc, so such a binary cannot start in it).
	AllowDynamic bool
}

// Result describes the image written.
type Result struct {
	Image          v1.Image
	Digest         v1.Hash  // manifest digest
	References     []string // repository:tag, as in the archive's RepoTags
	Layers         int
	CompressedSize int64 // manifest + config + compressed layers
	NoCACerts      bool  // the CA bundle was asked for but not found
}

// entry is one file or directory of a layer.
type entry struct {
	name     string // relative, no leading slash; directories end in /
	mode     int64
	uid, gid int
	data     []byte
}

func (e entry) isDir() bool { return strings.HasSuffix(e.name, "/") }

const (
	passwd = "root:x:0:0:root:/root:/sbin/nologin\n" +
		"nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n" +
		"nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n"
	group = "root:x:0:\n" +
		"nobody:x:65534:\n" +
		"nonroot:x:65532:\n"
	// Go's resolver reads it to decide between /etc/hosts and DNS.
	nsswitch = "hosts: files dns\n" +
		"networks: files\n"
)

// baseEntries is the base layer: what distroless/static gives a static Go
// binary, minus tzdata (bulkd works in UTC) and os-release.
func baseEntries(caCerts string) (entries []entry, noCA bool, err error) {
	entries = []entry{
		{name: "etc/", mode: 0o755},
		{name: "etc/group", mode: 0o644, data: []byte(group)},
		{name: "etc/nsswitch.conf", mode: 0o644, data: []byte(nsswitch)},
		{name: "etc/passwd", mode: 0o644, data: []byte(passwd)},
		{name: "home/", mode: 0o755},
		{name: "home/nonroot/", mode: 0o700, uid: NonRootUID, gid: NonRootUID},
		{name: "root/", mode: 0o700},
		{name: "tmp/", mode: 0o1777},
		{name: "usr/", mode: 0o755},
		{name: "usr/local/", mode: 0o755},
		{name: "usr/local/bin/", mode: 0o755},
	}
	if caCerts != "" {
		b, err := os.ReadFile(caCerts)
		switch {
		case errors.Is(err, os.ErrNotExist):
			noCA = true
		case err != nil:
			return nil, false, err
		default:
			entries = append(entries,
				entry{name: "etc/ssl/", mode: 0o755},
				entry{name: "etc/ssl/certs/", mode: 0o755},
				entry{name: "etc/ssl/certs/ca-certificates.crt", mode: 0o644, data: b})
		}
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].name < entries[j].name })
	return entries, noCA, nil
}

// tarEntries writes entries as an uncompressed tar with fixed timestamps.
func tarEntries(entries []entry, mtime time.Time) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{
			Name:    e.name,
			Mode:    e.mode,
			Uid:     e.uid,
			Gid:     e.gid,
			ModTime: mtime,
			Format:  tar.FormatPAX,
		}
		if e.isDir() {
			h.Typeflag = tar.TypeDir
		} else {
			h.Typeflag = tar.TypeReg
			h.Size = int64(len(e.data))
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if !e.isDir() {
			if _, err := tw.Write(e.data); err != nil {
				return nil, err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// isDynamic reports whether an ELF binary needs a dynamic loader.
func isDynamic(bin []byte) (bool, error) {
	f, err := elf.NewFile(bytes.NewReader(bin))
	if err != nil {
		return false, fmt.Errorf("not an ELF binary: %w", err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return true, nil
		}
	}
	return false, nil
}

func layerFromBytes(b []byte) (v1.Layer, error) {
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(b)), nil
	}, tarball.WithMediaType(types.OCILayer))
}

// references validates the repository and tags and returns repository:tag
// for each tag, in order, without duplicates.
func references(repository string, tags []string) ([]string, error) {
	if _, err := name.NewRepository(repository); err != nil {
		return nil, fmt.Errorf("repository %q: %w", repository, err)
	}
	if len(tags) == 0 {
		return nil, errors.New("no tags")
	}
	var refs []string
	seen := map[string]bool{}
	for _, t := range tags {
		ref := repository + ":" + t
		if _, err := name.NewTag(ref); err != nil {
			return nil, fmt.Errorf("tag %q: %w", t, err)
		}
		if !seen[ref] {
			seen[ref] = true
			refs = append(refs, ref)
		}
	}
	return refs, nil
}

// Build assembles the image and writes the archive and layout asked for.
func Build(o Options) (*Result, error) {
	refs, err := references(o.Repository, o.Tags)
	if err != nil {
		return nil, err
	}
	plat, err := v1.ParsePlatform(o.Platform)
	if err != nil {
		return nil, fmt.Errorf("platform %q: %w", o.Platform, err)
	}
	if plat.OS != "linux" {
		return nil, fmt.Errorf("platform %q: only linux images are built", o.Platform)
	}
	bin, err := readBinary(o)
	if err != nil {
		return nil, err
	}
	created := o.Created
	if created.IsZero() {
		created = time.Unix(0, 0).UTC()
	}

	baseLayer, appLayer, noCA, err := buildLayers(o.CACerts, bin, created)
	if err != nil {
		return nil, err
	}

	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	at := v1.Time{Time: created}
	img, err = mutate.Append(img,
		mutate.Addendum{Layer: baseLayer, History: v1.History{
			Created: at, CreatedBy: "hack/image: base (passwd, group, nsswitch.conf, /tmp, CA certificates)", Comment: "bulkd base"}},
		mutate.Addendum{Layer: appLayer, History: v1.History{
			Created: at, CreatedBy: "hack/image: COPY bulkd " + BinaryPath, Comment: "bulkd " + o.Version}},
	)
	if err != nil {
		return nil, err
	}
	labels := imageLabels(o, created)
	img, err = configure(img, plat, at, labels)
	if err != nil {
		return nil, err
	}
	// The same labels as manifest annotations (OCI image-spec annotations).
	img = mutate.Annotations(img, labels).(v1.Image)

	digest, err := img.Digest()
	if err != nil {
		return nil, err
	}
	size, err := imageSize(img)
	if err != nil {
		return nil, err
	}
	res := &Result{Image: img, Digest: digest, References: refs, Layers: 2, CompressedSize: size, NoCACerts: noCA}

	if o.LayoutPath != "" {
		if err := writeLayout(o.LayoutPath, img, refs); err != nil {
			return nil, fmt.Errorf("layout %s: %w", o.LayoutPath, err)
		}
	}
	if o.TarPath != "" {
		if err := writeArchive(o.TarPath, img, refs); err != nil {
			return nil, fmt.Errorf("archive %s: %w", o.TarPath, err)
		}
	}
	return res, nil
}

// readBinary reads the bulkd binary, which must be statically linked
// (the image has no libc) unless o allows otherwise.
func readBinary(o Options) ([]byte, error) {
	bin, err := os.ReadFile(o.Binary)
	if err != nil {
		return nil, err
	}
	dynamic, err := isDynamic(bin)
	if err != nil {
		return nil, fmt.Errorf("%s: %w (build it with GOOS=linux CGO_ENABLED=0)", o.Binary, err)
	}
	if dynamic && !o.AllowDynamic {
		return nil, fmt.Errorf("%s is dynamically linked; the image has no libc (build it with CGO_ENABLED=0, as make build does)", o.Binary)
	}
	return bin, nil
}

// buildLayers are the image's two layers: the base (passwd, group,
// nsswitch.conf, /tmp, CA certificates; noCA when there were none) and
// the binary, every file dated created.
func buildLayers(caCerts string, bin []byte, created time.Time) (base, app v1.Layer, noCA bool, err error) {
	baseFiles, noCA, err := baseEntries(caCerts)
	if err != nil {
		return nil, nil, false, err
	}
	baseTar, err := tarEntries(baseFiles, created)
	if err != nil {
		return nil, nil, false, err
	}
	appTar, err := tarEntries([]entry{
		{name: "usr/", mode: 0o755},
		{name: "usr/local/", mode: 0o755},
		{name: "usr/local/bin/", mode: 0o755},
		{name: strings.TrimPrefix(BinaryPath, "/"), mode: 0o755, data: bin},
	}, created)
	if err != nil {
		return nil, nil, false, err
	}
	if base, err = layerFromBytes(baseTar); err != nil {
		return nil, nil, false, err
	}
	if app, err = layerFromBytes(appTar); err != nil {
		return nil, nil, false, err
	}
	return base, app, noCA, nil
}

// imageLabels are the image's OCI labels.
func imageLabels(o Options, created time.Time) map[string]string {
	return map[string]string{
		"org.opencontainers.image.title":       "bulkd",
		"org.opencontainers.image.description": "bulkd: bulk company enrichment, email lookup and email verification",
		"org.opencontainers.image.version":     o.Version,
		"org.opencontainers.image.revision":    o.Commit,
		"org.opencontainers.image.source":      o.Source,
		"org.opencontainers.image.created":     created.Format(time.RFC3339),
	}
}

// configure sets the image's platform, date, labels and how it runs: the
// binary as its entrypoint, as the non-root user.
func configure(img v1.Image, plat *v1.Platform, at v1.Time, labels map[string]string) (v1.Image, error) {
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.Architecture, cf.OS, cf.Variant = plat.Architecture, plat.OS, plat.Variant
	cf.Created = at
	cf.Config = v1.Config{
		Entrypoint: []string{BinaryPath},
		User:       fmt.Sprintf("%d:%d", NonRootUID, NonRootUID),
		WorkingDir: "/",
		Env:        []string{"PATH=/usr/local/bin:/usr/bin:/bin"},
		Labels:     labels,
	}
	return mutate.ConfigFile(img, cf)
}

func imageSize(img v1.Image) (int64, error) {
	m, err := img.Manifest()
	if err != nil {
		return 0, err
	}
	raw, err := img.RawManifest()
	if err != nil {
		return 0, err
	}
	n := int64(len(raw)) + m.Config.Size
	for _, l := range m.Layers {
		n += l.Size
	}
	return n, nil
}

// refAnnotations names one index entry the way `docker save` (25+) does:
// containerd reads io.containerd.image.name, OCI tools the ref.name tag.
func refAnnotations(ref string) map[string]string {
	return map[string]string{
		"io.containerd.image.name":          ref,
		"org.opencontainers.image.ref.name": ref[strings.LastIndex(ref, ":")+1:],
	}
}

// sink receives the files of an OCI image layout: a tar or a directory.
type sink interface {
	dir(name string) error
	file(name string, r io.Reader, size int64) error
}

type tarSink struct {
	tw    *tar.Writer
	mtime time.Time
}

func (s tarSink) dir(name string) error {
	return s.tw.WriteHeader(&tar.Header{Name: name + "/", Mode: 0o755, ModTime: s.mtime, Typeflag: tar.TypeDir, Format: tar.FormatPAX})
}

func (s tarSink) file(name string, r io.Reader, size int64) error {
	h := &tar.Header{Name: name, Mode: 0o644, Size: size, ModTime: s.mtime, Typeflag: tar.TypeReg, Format: tar.FormatPAX}
	if err := s.tw.WriteHeader(h); err != nil {
		return err
	}
	n, err := io.Copy(s.tw, r)
	if err == nil && n != size {
		err = fmt.Errorf("%s: wrote %d bytes, want %d", name, n, size)
	}
	return err
}

type dirSink string

func (d dirSink) dir(name string) error {
	return os.MkdirAll(filepath.Join(string(d), filepath.FromSlash(name)), 0o755)
}

func (d dirSink) file(name string, r io.Reader, _ int64) error {
	f, err := os.Create(filepath.Join(string(d), filepath.FromSlash(name)))
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, r); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// writeLayout writes the image as an OCI image layout directory (replacing dir).
func writeLayout(dir string, img v1.Image, refs []string) error {
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return writeOCI(dirSink(dir), img, refs)
}

// writeArchive writes the image as a tar of an OCI image layout (atomically).
func writeArchive(path string, img v1.Image, refs []string) (err error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp := path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(tmp)
		}
	}()
	cf, err := img.ConfigFile()
	if err != nil {
		return err
	}
	tw := tar.NewWriter(f)
	if err := writeOCI(tarSink{tw: tw, mtime: cf.Created.Time}, img, refs); err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// writeOCI writes an OCI image layout (oci-layout, index.json naming the
// manifest once per reference, blobs/sha256/...) plus the manifest.json of a
// `docker save` archive pointing at the same blobs, the way `docker save`
// (25+) does, so docker/podman load and containerd import all take it.
func writeOCI(s sink, img v1.Image, refs []string) error {
	putBytes := func(name string, b []byte) error { return s.file(name, bytes.NewReader(b), int64(len(b))) }
	blob := func(h v1.Hash) string { return "blobs/" + h.Algorithm + "/" + h.Hex }

	manifest, err := img.Manifest()
	if err != nil {
		return err
	}
	rawManifest, err := img.RawManifest()
	if err != nil {
		return err
	}
	rawConfig, err := img.RawConfigFile()
	if err != nil {
		return err
	}
	digest, err := img.Digest()
	if err != nil {
		return err
	}
	mt, err := img.MediaType()
	if err != nil {
		return err
	}

	if err := putBytes("oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)); err != nil {
		return err
	}
	index := v1.IndexManifest{SchemaVersion: 2, MediaType: types.OCIImageIndex}
	for _, ref := range refs {
		index.Manifests = append(index.Manifests, v1.Descriptor{
			MediaType: mt, Digest: digest, Size: int64(len(rawManifest)), Annotations: refAnnotations(ref)})
	}
	rawIndex, err := json.Marshal(index)
	if err != nil {
		return err
	}
	if err := putBytes("index.json", rawIndex); err != nil {
		return err
	}
	if err := s.dir("blobs"); err != nil {
		return err
	}
	if err := s.dir("blobs/sha256"); err != nil {
		return err
	}
	if err := putBytes(blob(digest), rawManifest); err != nil {
		return err
	}
	if err := putBytes(blob(manifest.Config.Digest), rawConfig); err != nil {
		return err
	}
	layers, err := img.Layers()
	if err != nil {
		return err
	}
	var layerPaths []string
	for _, l := range layers {
		d, err := l.Digest()
		if err != nil {
			return err
		}
		size, err := l.Size()
		if err != nil {
			return err
		}
		rc, err := l.Compressed()
		if err != nil {
			return err
		}
		err = s.file(blob(d), rc, size)
		rc.Close()
		if err != nil {
			return err
		}
		layerPaths = append(layerPaths, blob(d))
	}
	docker := []struct {
		Config   string
		RepoTags []string
		Layers   []string
	}{{Config: blob(manifest.Config.Digest), RepoTags: refs, Layers: layerPaths}}
	rawDocker, err := json.Marshal(docker)
	if err != nil {
		return err
	}
	return putBytes("manifest.json", rawDocker)
}

// WriteRootFS writes the base layer's files into dir (for the Dockerfile).
// Ownership is set when running as root.
func WriteRootFS(dir, caCerts string) error {
	entries, noCA, err := baseEntries(caCerts)
	if err != nil {
		return err
	}
	if noCA {
		fmt.Fprintf(os.Stderr, "image rootfs: warning: %s not found; no CA certificates\n", caCerts)
	}
	for _, e := range entries {
		p := filepath.Join(dir, filepath.FromSlash(strings.TrimSuffix(e.name, "/")))
		mode := os.FileMode(e.mode & 0o777)
		if e.mode&0o1000 != 0 {
			mode |= os.ModeSticky
		}
		if e.isDir() {
			if err := os.MkdirAll(p, 0o755); err != nil {
				return err
			}
		} else if err := os.WriteFile(p, e.data, 0o644); err != nil {
			return err
		}
		if err := os.Chmod(p, mode); err != nil {
			return err
		}
		if os.Geteuid() == 0 {
			if err := os.Lchown(p, e.uid, e.gid); err != nil {
				return err
			}
		}
	}
	return nil
}
