package chart

// The privacy secret (BULKD_PRIVACY_SECRET, docs/privacy.md): without it
// `bulkd admin erase` refuses and nothing is suppressed, and a change of it
// makes every erased person's hash unknown again. The chart generates it
// once, keeps it across upgrades (helm's lookup of the release's Secret)
// and hands it to the API pods.

import (
	"context"
	"encoding/base64"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// privacyValue is the value of the chart's privacy Secret in r.
func privacyValue(t *testing.T, r *rendered) (string, *unstructured.Unstructured) {
	t.Helper()
	sec := r.get(t, "Secret", "bulkd-privacy")
	v, err := base64.StdEncoding.DecodeString(nestedString(t, sec, "data", "privacy-secret"))
	if err != nil {
		t.Fatal(err)
	}
	return string(v), sec
}

// apiPrivacyRef is where the API container's BULKD_PRIVACY_SECRET comes from.
func apiPrivacyRef(t *testing.T, r *rendered) (name, key string) {
	t.Helper()
	e, ok := envOf(containers(t, r.get(t, "Deployment", "bulkd-apiserver"))[0])["BULKD_PRIVACY_SECRET"]
	if !ok {
		t.Fatal("the apiserver has no BULKD_PRIVACY_SECRET")
	}
	return secretRef(e)
}

func TestChartPrivacySecret(t *testing.T) {
	const ns = "chart-privacy"
	// Generated: random, long, kept on uninstall, wired to the API pods.
	r, err := render(t, "bulkd", ns, nil)
	if err != nil {
		t.Fatal(err)
	}
	v1, sec := privacyValue(t, r)
	if len(v1) != 48 {
		t.Errorf("generated privacy secret of %d characters, want 48", len(v1))
	}
	if sec.GetAnnotations()["helm.sh/resource-policy"] != "keep" {
		t.Errorf("privacy Secret annotations %v: it must outlive an uninstall", sec.GetAnnotations())
	}
	if n, k := apiPrivacyRef(t, r); n != "bulkd-privacy" || k != "privacy-secret" {
		t.Errorf("BULKD_PRIVACY_SECRET from %s/%s", n, k)
	}
	if !strings.Contains(r.notes, "secret/bulkd-privacy, key privacy-secret") || !strings.Contains(r.notes, "kept on uninstall") {
		t.Errorf("NOTES.txt does not name the privacy Secret:\n%s", r.notes)
	}
	tmpl := nested(t, r.get(t, "Deployment", "bulkd-apiserver"), "spec", "template", "metadata", "annotations")
	if _, ok := asMap(tmpl)["checksum/privacy"]; !ok {
		t.Errorf("the API pods do not roll when the privacy secret changes: %v", tmpl)
	}
	r2, err := render(t, "bulkd", ns, nil)
	if err != nil {
		t.Fatal(err)
	}
	if v2, _ := privacyValue(t, r2); v2 == v1 {
		t.Error("two renders without a cluster generated the same secret: not random")
	}

	// Given.
	given := strings.Repeat("k", 40)
	r, err = render(t, "bulkd", ns, parseValues(t, "privacy: {secret: "+given+"}"))
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := privacyValue(t, r); v != given {
		t.Errorf("privacy.secret %q rendered as %q", given, v)
	}

	// An existing Secret: none created, the pods read that one.
	r, err = render(t, "bulkd", ns, parseValues(t, "privacy: {existingSecret: mine, secretKey: key1}"))
	if err != nil {
		t.Fatal(err)
	}
	if r.find("Secret", "bulkd-privacy") != nil {
		t.Error("a privacy Secret rendered although privacy.existingSecret is set")
	}
	if !strings.Contains(r.notes, "secret/mine, key key1 (keys the suppression list of erased people; yours") {
		t.Errorf("NOTES.txt does not name the existing privacy Secret:\n%s", r.notes)
	}
	if n, k := apiPrivacyRef(t, r); n != "mine" || k != "key1" {
		t.Errorf("BULKD_PRIVACY_SECRET from %s/%s, want mine/key1", n, k)
	}

	// A short one is refused.
	if _, err := render(t, "bulkd", ns, parseValues(t, "privacy: {secret: short}")); err == nil || !strings.Contains(err.Error(), "privacy") {
		t.Errorf("a 5-character privacy secret: %v, want a schema error", err)
	}

	// helm upgrade: the release's Secret is looked up and its value kept.
	c := cluster(t)
	ensureNamespace(t, c, ns)
	old := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "bulkd-privacy"},
		Data: map[string][]byte{"privacy-secret": []byte("kept-from-the-first-install-0123456789")}}
	if err := c.Create(context.Background(), old); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Delete(context.Background(), old) })
	r, err = renderWith(t, "bulkd", ns, nil, k8sConfig)
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := privacyValue(t, r); v != "kept-from-the-first-install-0123456789" {
		t.Errorf("upgrade: privacy secret %q, want the release's", v)
	}
	dryRunApply(t, c, r.objs)
}
