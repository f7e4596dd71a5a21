// Package chart tests the Helm chart (charts/bulkd) and the kustomize
// config (config/): helm lint through helm's Go library, rendering with the
// library for several value sets, and a server-side dry-run apply of every
// rendered object to an envtest kube-apiserver so that schema errors fail.
package chart

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"helm.sh/helm/v4/pkg/chart/common"
	"helm.sh/helm/v4/pkg/chart/common/util"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"helm.sh/helm/v4/pkg/engine"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	k8syaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

const (
	repoRoot = "../.."
	// kubeVersion is what the chart is linted and rendered for: the
	// kube-apiserver hack/envtest.sh builds.
	kubeVersion = "v1.36.4"
)

var (
	chartDir    = filepath.Join(repoRoot, "charts", "bulkd")
	configDir   = filepath.Join(repoRoot, "config")
	crdBasesDir = filepath.Join(repoRoot, "config", "crd", "bases")
	roleYAML    = filepath.Join(repoRoot, "config", "rbac", "role.yaml")
)

// ---------------------------------------------------------------- rendering

// rendered is one render of the chart.
type rendered struct {
	objs  []*unstructured.Unstructured
	notes string
}

// get returns the object of that kind and name, or fails.
func (r *rendered) get(t *testing.T, kind, name string) *unstructured.Unstructured {
	t.Helper()
	if o := r.find(kind, name); o != nil {
		return o
	}
	t.Fatalf("no %s %q rendered; have: %s", kind, name, r.names())
	return nil
}

func (r *rendered) find(kind, name string) *unstructured.Unstructured {
	for _, o := range r.objs {
		if o.GetKind() == kind && o.GetName() == name {
			return o
		}
	}
	return nil
}

func (r *rendered) ofKind(kind string) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, o := range r.objs {
		if o.GetKind() == kind {
			out = append(out, o)
		}
	}
	return out
}

func (r *rendered) names() string {
	var s []string
	for _, o := range r.objs {
		s = append(s, o.GetKind()+"/"+o.GetName())
	}
	return strings.Join(s, ", ")
}

func kubeVer(t *testing.T) *common.KubeVersion {
	t.Helper()
	kv, err := common.ParseKubeVersion(kubeVersion)
	if err != nil {
		t.Fatal(err)
	}
	return kv
}

// parseValues reads values given as YAML, as `helm -f` would.
func parseValues(t *testing.T, y string) map[string]any {
	t.Helper()
	v, err := common.ReadValues([]byte(y))
	if err != nil {
		t.Fatalf("values: %v", err)
	}
	return v
}

// render renders the chart like `helm template --kube-version` does, values
// schema included.
func render(t *testing.T, release, namespace string, vals map[string]any) (*rendered, error) {
	t.Helper()
	return renderWith(t, release, namespace, vals, nil)
}

// renderWith renders like render, and with a cluster (cfg not nil) the way
// `helm install` does: the templates' lookup function reads from it.
func renderWith(t *testing.T, release, namespace string, vals map[string]any, cfg *rest.Config) (*rendered, error) {
	t.Helper()
	chrt, err := loader.Load(chartDir)
	if err != nil {
		t.Fatalf("load chart: %v", err)
	}
	caps := common.DefaultCapabilities.Copy()
	caps.KubeVersion = *kubeVer(t)
	opts := common.ReleaseOptions{Name: release, Namespace: namespace, Revision: 1, IsInstall: true}
	rv, err := util.ToRenderValuesWithSchemaValidation(chrt, vals, opts, caps, false)
	if err != nil {
		return nil, err
	}
	var files map[string]string
	if cfg != nil {
		files, err = engine.RenderWithClient(chrt, rv, cfg)
	} else {
		files, err = engine.Render(chrt, rv)
	}
	if err != nil {
		return nil, err
	}
	r := &rendered{}
	keys := make([]string, 0, len(files))
	for k := range files {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		base := filepath.Base(k)
		switch {
		case base == "NOTES.txt":
			r.notes = files[k]
			continue
		case strings.HasPrefix(base, "_"):
			continue
		}
		objs, err := decodeObjects([]byte(files[k]))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", k, err)
		}
		r.objs = append(r.objs, objs...)
	}
	return r, nil
}

// decodeObjects reads a multi-document YAML stream into objects, skipping
// empty documents.
func decodeObjects(b []byte) ([]*unstructured.Unstructured, error) {
	dec := k8syaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096)
	var out []*unstructured.Unstructured
	for {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return nil, err
		}
		if len(m) == 0 {
			continue
		}
		u := &unstructured.Unstructured{Object: m}
		if u.GetKind() == "" || u.GetAPIVersion() == "" || u.GetName() == "" {
			return nil, fmt.Errorf("object without apiVersion, kind or name: %v", m)
		}
		out = append(out, u)
	}
}

// ---------------------------------------------------------------- envtest

var (
	envOnce   sync.Once
	testEnv   *envtest.Environment
	k8sClient client.Client
	k8sConfig *rest.Config
	envErr    error
)

// hasYAML reports whether dir holds *.yaml files.
func hasYAML(dir string) bool {
	m, _ := filepath.Glob(filepath.Join(dir, "*.yaml"))
	return len(m) > 0
}

// crdPaths: the generated BulkJob CRD when `make manifests` has made it,
// else a stand-in; and the ServiceMonitor CRD subset.
func crdPaths() (paths []string, stub bool) {
	paths = []string{filepath.Join("testdata", "crds")}
	if hasYAML(crdBasesDir) {
		return append(paths, crdBasesDir), false
	}
	return append(paths, filepath.Join("testdata", "stubs", "bulkd.io_bulkjobs.yaml")), true
}

// assetsDir is KUBEBUILDER_ASSETS, or what hack/envtest.sh prints (it
// returns at once when the binaries are cached, and builds them otherwise).
func assetsDir() (string, error) {
	if d := os.Getenv("KUBEBUILDER_ASSETS"); d != "" {
		return d, nil
	}
	cmd := exec.Command(filepath.Join(repoRoot, "hack", "envtest.sh"))
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("KUBEBUILDER_ASSETS is not set and hack/envtest.sh failed: %w", err)
	}
	d := strings.TrimSpace(string(out))
	os.Setenv("KUBEBUILDER_ASSETS", d)
	return d, nil
}

// cluster starts one envtest API server for the whole test binary.
func cluster(t *testing.T) client.Client {
	t.Helper()
	envOnce.Do(func() {
		var assets string
		if assets, envErr = assetsDir(); envErr != nil {
			return
		}
		paths, _ := crdPaths()
		testEnv = &envtest.Environment{
			BinaryAssetsDirectory: assets,
			CRDDirectoryPaths:     paths,
			ErrorIfCRDPathMissing: true,
		}
		cfg, err := testEnv.Start()
		if err != nil {
			envErr = fmt.Errorf("start envtest (assets %s): %w", assets, err)
			return
		}
		k8sConfig = cfg
		k8sClient, envErr = client.New(cfg, client.Options{})
	})
	if envErr != nil {
		t.Fatal(envErr)
	}
	return k8sClient
}

func TestMain(m *testing.M) {
	code := m.Run()
	if testEnv != nil {
		if err := testEnv.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stop envtest:", err)
		}
	}
	os.Exit(code)
}

// ensureNamespace creates a namespace for real (dry-run objects need it).
func ensureNamespace(t *testing.T, c client.Client, name string) {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := c.Create(context.Background(), ns); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("create namespace %s: %v", name, err)
	}
}

// dryRunApply server-side applies every object with dryRun=All: the API
// server validates each against its schema (built-in types and CRDs alike;
// unknown fields are errors in server-side apply) and runs admission, and
// nothing is stored.
func dryRunApply(t *testing.T, c client.Client, objs []*unstructured.Unstructured) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, o := range objs {
		if err := applyDryRun(ctx, c, o); err != nil {
			t.Errorf("dry-run apply %s %s/%s: %v", o.GetKind(), o.GetNamespace(), o.GetName(), err)
		}
	}
}

func applyDryRun(ctx context.Context, c client.Client, o *unstructured.Unstructured) error {
	return c.Apply(ctx, client.ApplyConfigurationFromUnstructured(o.DeepCopy()),
		client.DryRunAll, client.FieldOwner("bulkd-chart-test"), client.ForceOwnership)
}

// ---------------------------------------------------------------- accessors

func nested(t *testing.T, o *unstructured.Unstructured, path ...string) any {
	t.Helper()
	v, ok, err := unstructured.NestedFieldNoCopy(o.Object, path...)
	if err != nil || !ok {
		t.Fatalf("%s/%s: no field %s", o.GetKind(), o.GetName(), strings.Join(path, "."))
	}
	return v
}

func nestedString(t *testing.T, o *unstructured.Unstructured, path ...string) string {
	t.Helper()
	s, _ := nested(t, o, path...).(string)
	return s
}

func asMap(v any) map[string]any {
	m, _ := v.(map[string]any)
	return m
}

func asSlice(v any) []any {
	s, _ := v.([]any)
	return s
}

// containers of a Deployment's pod template.
func containers(t *testing.T, d *unstructured.Unstructured) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, c := range asSlice(nested(t, d, "spec", "template", "spec", "containers")) {
		out = append(out, asMap(c))
	}
	return out
}

// envOf returns a container's env entries by name.
func envOf(c map[string]any) map[string]map[string]any {
	out := map[string]map[string]any{}
	for _, e := range asSlice(c["env"]) {
		m := asMap(e)
		out[m["name"].(string)] = m
	}
	return out
}

// secretRef returns the secretKeyRef name and key of an env entry.
func secretRef(e map[string]any) (name, key string) {
	ref := asMap(asMap(e["valueFrom"])["secretKeyRef"])
	name, _ = ref["name"].(string)
	key, _ = ref["key"].(string)
	return name, key
}
