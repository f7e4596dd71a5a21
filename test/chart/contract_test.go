package chart

import (
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
)

// TestEnvMatchesBinary: every BULKD_* variable the chart (and config/) sets is a flag
// (in its environment form) of the bulkd command that reads it, so a
// renamed or misspelt setting fails here instead of being silently ignored.
// The commands' own usage (`bulkd CMD -h`) lists the names.
func TestEnvMatchesBinary(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "bulkd")
	build := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-o", bin, "./cmd/bulkd")
	build.Dir = repoRoot
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/bulkd: %v\n%s", err, out)
	}
	envName := regexp.MustCompile(`\[(BULKD_[A-Z0-9_]+)\]`)
	known := map[string]map[string]bool{}
	for _, cmd := range []string{"apiserver", "controller", "processor"} {
		out, _ := exec.Command(bin, cmd, "-h").CombinedOutput() // -h exits non-zero
		known[cmd] = map[string]bool{}
		for _, m := range envName.FindAllStringSubmatch(string(out), -1) {
			known[cmd][m[1]] = true
		}
		if len(known[cmd]) == 0 {
			t.Fatalf("bulkd %s -h lists no BULKD_* settings:\n%s", cmd, out)
		}
	}

	var custom scenario
	for _, s := range scenarios {
		if s.name == "custom" {
			custom = s
		}
	}
	r, err := render(t, custom.release, custom.namespace, parseValues(t, custom.values))
	if err != nil {
		t.Fatal(err)
	}
	// The chart (its most customised render) and config/default.
	deployments := r.ofKind("Deployment")
	configMaps := r.ofKind("ConfigMap")
	k := &rendered{objs: kustomizeDefault(t, kubectlPath(t))}
	deployments = append(deployments, k.ofKind("Deployment")...)
	configMaps = append(configMaps, k.ofKind("ConfigMap")...)
	for _, d := range deployments {
		for _, c := range containers(t, d) {
			args := asSlice(c["args"])
			if len(args) == 0 {
				t.Fatalf("%s: no command in args", d.GetName())
			}
			cmd := args[0].(string)
			if known[cmd] == nil {
				t.Fatalf("%s runs `bulkd %s`, which is not a command tested here", d.GetName(), cmd)
			}
			for name := range envOf(c) {
				if strings.HasPrefix(name, "BULKD_") && !known[cmd][name] {
					t.Errorf("%s sets %s, which `bulkd %s` does not read", d.GetName(), name, cmd)
				}
			}
		}
	}
	// The ConfigMap is shared by the apiserver, the controller and the
	// processor pods: each key must be read by at least one of them.
	for _, cm := range configMaps {
		for k := range asMap(cm.Object["data"]) {
			if !known["apiserver"][k] && !known["controller"][k] && !known["processor"][k] {
				t.Errorf("ConfigMap %s sets %s, which no bulkd command reads", cm.GetName(), k)
			}
		}
	}
}
