package main

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"sigs.k8s.io/yaml"
)

const repoRoot = "../.."

// buildBulkd builds the real bulkd binary. Not with make build's
// CGO_ENABLED=0 -trimpath: that would compile the whole dependency tree a
// second time (minutes on 2 cores); with the flags `go test` uses, only the
// link is new. The result may be dynamically linked, which the test allows
// (it runs the binary on this machine, not in the image).
func buildBulkd(t *testing.T, dir string) string {
	t.Helper()
	out := filepath.Join(dir, "bulkd")
	cmd := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "build",
		"-ldflags", "-s -w -X main.version=v9.9.9-imagetest -X main.commit=c0ffee1",
		"-o", out, "./cmd/bulkd")
	cmd.Dir = repoRoot
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/bulkd: %v\n%s", err, b)
	}
	return out
}

func TestImage(t *testing.T) {
	dir := t.TempDir()
	bin := buildBulkd(t, dir)
	tarPath := filepath.Join(dir, "out", "bulkd-image.tar")
	layoutPath := filepath.Join(dir, "out", "oci")
	o := Options{
		Binary:     bin,
		Repository: DefaultRepository,
		Tags:       []string{"0.1.0", "v9.9.9-imagetest", "latest"},
		Version:    "v9.9.9-imagetest",
		Commit:     "c0ffee1",
		Source:     DefaultSource,
		Platform:   "linux/" + runtime.GOARCH,
		CACerts:    DefaultCACerts,
		TarPath:    tarPath,
		LayoutPath: layoutPath,
	}
	b, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	if dyn, err := isDynamic(b); err != nil {
		t.Fatal(err)
	} else if dyn {
		// make image refuses a binary that cannot start in a libc-less image.
		if _, err := Build(o); err == nil || !strings.Contains(err.Error(), "dynamically linked") {
			t.Errorf("Build of a dynamically linked binary: %v, want a refusal", err)
		}
		o.AllowDynamic = true
	}
	res, err := Build(o)
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(tarPath)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("image %s: %d bytes compressed, archive %d bytes", res.Digest, res.CompressedSize, st.Size())

	// 1. The archive loads as a `docker save` tarball under every tag.
	for _, ref := range res.References {
		tag, err := name.NewTag(ref)
		if err != nil {
			t.Fatal(err)
		}
		img, err := tarball.ImageFromPath(tarPath, &tag)
		if err != nil {
			t.Fatalf("tarball.ImageFromPath(%s): %v", ref, err)
		}
		checkImage(t, img, o)
		sameLayers(t, img, res.Image)
	}

	// 2. The archive is also an OCI image layout (untarred), and so is the
	// layout directory; both name the same manifest under every tag.
	untarred := filepath.Join(dir, "untarred")
	untar(t, tarPath, untarred)
	for _, p := range []string{untarred, layoutPath} {
		idx, err := layout.ImageIndexFromPath(p)
		if err != nil {
			t.Fatalf("layout %s: %v", p, err)
		}
		im, err := idx.IndexManifest()
		if err != nil {
			t.Fatal(err)
		}
		if len(im.Manifests) != len(res.References) {
			t.Fatalf("layout %s: %d manifests, want %d", p, len(im.Manifests), len(res.References))
		}
		for i, d := range im.Manifests {
			if d.Digest != res.Digest {
				t.Errorf("layout %s: manifest %d is %s, want %s", p, i, d.Digest, res.Digest)
			}
			if got := d.Annotations["io.containerd.image.name"]; got != res.References[i] {
				t.Errorf("layout %s: manifest %d named %q, want %q", p, i, got, res.References[i])
			}
		}
		img, err := idx.Image(res.Digest)
		if err != nil {
			t.Fatal(err)
		}
		checkImage(t, img, o)
	}

	// 3. The filesystem: base files, and a binary that runs.
	files := flatten(t, res.Image)
	pw, ok := files["etc/passwd"]
	if !ok || !strings.Contains(string(pw.data), "nonroot:x:65532:65532:") {
		t.Errorf("etc/passwd lacks the nonroot user: %q", pw.data)
	}
	if h := files["tmp"]; h.hdr == nil || h.hdr.Mode&0o1777 != 0o1777 {
		t.Errorf("tmp/ is not mode 1777: %+v", h.hdr)
	}
	if h := files["home/nonroot"]; h.hdr == nil || h.hdr.Uid != NonRootUID {
		t.Errorf("home/nonroot/ is not owned by %d: %+v", NonRootUID, h.hdr)
	}
	if _, err := os.Stat(DefaultCACerts); err == nil {
		if f := files["etc/ssl/certs/ca-certificates.crt"]; len(f.data) == 0 {
			t.Error("CA bundle missing from the image")
		}
	}
	f := files[strings.TrimPrefix(BinaryPath, "/")]
	if f.hdr == nil || f.hdr.Mode&0o755 != 0o755 {
		t.Fatalf("%s missing or not executable", BinaryPath)
	}
	extracted := filepath.Join(dir, "extracted-bulkd")
	if err := os.WriteFile(extracted, f.data, 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(extracted, "version").CombinedOutput()
	if err != nil {
		t.Fatalf("bulkd version from the image: %v\n%s", err, out)
	}
	if want := "bulkd v9.9.9-imagetest (commit c0ffee1)"; !strings.Contains(string(out), want) {
		t.Errorf("bulkd version printed %q, want %q", out, want)
	}

	// 4. Reproducible: the same inputs give the same digest.
	o.TarPath, o.LayoutPath = "", ""
	again, err := Build(o)
	if err != nil {
		t.Fatal(err)
	}
	if again.Digest != res.Digest {
		t.Errorf("second build has digest %s, first %s", again.Digest, res.Digest)
	}
}

func checkImage(t *testing.T, img v1.Image, o Options) {
	t.Helper()
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	c := cf.Config
	if len(c.Entrypoint) != 1 || c.Entrypoint[0] != BinaryPath {
		t.Errorf("entrypoint %q, want [%s]", c.Entrypoint, BinaryPath)
	}
	// The controller starts processor pods with command "bulkd": found on PATH.
	if !slices.Contains(c.Env, "PATH=/usr/local/bin:/usr/bin:/bin") {
		t.Errorf("env %q lacks PATH with /usr/local/bin", c.Env)
	}
	if c.User != "65532:65532" {
		t.Errorf("user %q, want 65532:65532", c.User)
	}
	if cf.OS != "linux" || cf.Architecture != runtime.GOARCH {
		t.Errorf("platform %s/%s", cf.OS, cf.Architecture)
	}
	for k, want := range map[string]string{
		"org.opencontainers.image.version":  o.Version,
		"org.opencontainers.image.revision": o.Commit,
		"org.opencontainers.image.source":   o.Source,
	} {
		if got := c.Labels[k]; got != want {
			t.Errorf("label %s = %q, want %q", k, got, want)
		}
	}
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	if len(layers) != 2 {
		t.Fatalf("%d layers, want 2 (base, binary)", len(layers))
	}
	// The last layer holds exactly the binary and its directories.
	rc, err := layers[1].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	found := false
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if "/"+h.Name == BinaryPath {
			found = true
		} else if h.Typeflag != tar.TypeDir {
			t.Errorf("binary layer has unexpected file %s", h.Name)
		}
	}
	if !found {
		t.Errorf("binary layer lacks %s", BinaryPath)
	}
}

func sameLayers(t *testing.T, a, b v1.Image) {
	t.Helper()
	la, _ := a.Layers()
	lb, _ := b.Layers()
	if len(la) != len(lb) {
		t.Fatalf("%d layers vs %d", len(la), len(lb))
	}
	for i := range la {
		da, err := la[i].DiffID()
		if err != nil {
			t.Fatal(err)
		}
		db, _ := lb[i].DiffID()
		if da != db {
			t.Errorf("layer %d: diff id %s, want %s", i, da, db)
		}
	}
	ca, _ := a.ConfigName()
	cb, _ := b.ConfigName()
	if ca != cb {
		t.Errorf("config %s, want %s", ca, cb)
	}
}

type file struct {
	hdr  *tar.Header
	data []byte
}

// flatten reads the image's merged filesystem.
func flatten(t *testing.T, img v1.Image) map[string]file {
	t.Helper()
	rc := mutate.Extract(img)
	defer rc.Close()
	files := map[string]file{}
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		if _, err := io.Copy(&buf, tr); err != nil {
			t.Fatal(err)
		}
		files[h.Name] = file{hdr: h, data: buf.Bytes()}
	}
	return files
}

func untar(t *testing.T, src, dst string) {
	t.Helper()
	f, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dst, filepath.FromSlash(h.Name))
		if !strings.HasPrefix(p, filepath.Clean(dst)+string(os.PathSeparator)) {
			t.Fatalf("archive entry %q escapes", h.Name)
		}
		if h.Typeflag == tar.TypeDir {
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestRootFS(t *testing.T) {
	dir := t.TempDir()
	if err := WriteRootFS(dir, DefaultCACerts); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "etc", "passwd"))
	if err != nil || !strings.Contains(string(b), "nonroot:x:65532") {
		t.Fatalf("etc/passwd: %q %v", b, err)
	}
	fi, err := os.Stat(filepath.Join(dir, "tmp"))
	if err != nil || fi.Mode()&os.ModeSticky == 0 || fi.Mode().Perm() != 0o777 {
		t.Fatalf("tmp: %v %v", fi.Mode(), err)
	}
}

// TestDefaultsMatchChart: the chart's default image is the one `make image`
// builds: same repository, and a tag (appVersion) that make image also sets.
func TestDefaultsMatchChart(t *testing.T) {
	var values struct {
		Image struct {
			Repository string `json:"repository"`
			Tag        string `json:"tag"`
		} `json:"image"`
	}
	var chart struct {
		AppVersion string `json:"appVersion"`
	}
	readYAML(t, filepath.Join(repoRoot, "charts/bulkd/values.yaml"), &values)
	readYAML(t, filepath.Join(repoRoot, "charts/bulkd/Chart.yaml"), &chart)
	if values.Image.Repository != DefaultRepository {
		t.Errorf("chart image.repository %q, make image builds %q", values.Image.Repository, DefaultRepository)
	}
	if values.Image.Tag != "" && values.Image.Tag != chart.AppVersion {
		t.Errorf("chart image.tag %q is neither empty nor appVersion %q", values.Image.Tag, chart.AppVersion)
	}
	if _, err := references(DefaultRepository, []string{chart.AppVersion}); err != nil {
		t.Errorf("appVersion %q is not a valid image tag: %v", chart.AppVersion, err)
	}
	mk, err := os.ReadFile(filepath.Join(repoRoot, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(mk), "--tag $(IMAGE_TAG)") || !strings.Contains(string(mk), "charts/bulkd/Chart.yaml") {
		t.Error("Makefile's image target no longer tags the image with the chart's appVersion (IMAGE_TAG from charts/bulkd/Chart.yaml)")
	}
}

func readYAML(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}
