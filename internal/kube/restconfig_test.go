package kube

import (
	"os"
	"path/filepath"
	"testing"
)

// A controller or API started with --kubeconfig must not be paced by
// client-go's default client-side limit (5 requests a second), which a
// pod's in-cluster configuration (ctrl.GetConfig) does not have either.
func TestRESTConfigFromAKubeconfigFileHasNoClientSideLimit(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kubeconfig")
	kc := `apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {server: "https://127.0.0.1:6443"}
users:
- name: u
  user: {token: "t"}
contexts:
- name: x
  context: {cluster: c, user: u}
current-context: x
`
	if err := os.WriteFile(path, []byte(kc), 0o600); err != nil {
		t.Fatal(err)
	}
	rc, err := RESTConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	if rc.QPS >= 0 || rc.RateLimiter != nil {
		t.Fatalf("QPS %v, rate limiter %v: want no client-side limit (QPS < 0)", rc.QPS, rc.RateLimiter)
	}
	if rc.Host != "https://127.0.0.1:6443" {
		t.Fatalf("host %q", rc.Host)
	}
}
