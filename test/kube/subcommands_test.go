package kube_test

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/bulkd/bulkd/internal/bulkdtest"
	"github.com/bulkd/bulkd/internal/credits"
)

// The real `bulkd controller` and `bulkd apiserver` processes, configured
// by flags and BULKD_* variables only, each as its least-privileged user:
// the controller serves its probes and metrics (it is a standby: the
// in-process controller holds the leader lease), and a job submitted to
// the apiserver process runs to completion.
func TestSubcommands(t *testing.T) {
	healthAddr, metricsAddr, apiAddr, apiMetricsAddr := bulkdtest.FreeAddr(t), bulkdtest.FreeAddr(t), bulkdtest.FreeAddr(t), bulkdtest.FreeAddr(t)
	ctrlProc := h.startBinary(t, "bulkd-controller", []string{"controller",
		"--namespace", namespace, "--health-probe-bind-address", healthAddr, "--metrics-bind-address", metricsAddr},
		"BULKD_REDIS_URL="+h.redisURL, "BULKD_PROCESSOR_IMAGE=localhost/bulkd:e2e",
		`BULKD_PROCESSOR_RESOURCES={"requests":{"cpu":"100m"}}`, "BULKD_PARALLELISM_CAP=4")
	apiProc := h.startBinary(t, "bulkd-apiserver", []string{"apiserver", "--namespace", namespace, "--listen", apiAddr, "--metrics-listen", apiMetricsAddr},
		"BULKD_REDIS_URL="+h.redisURL, "BULKD_SHARD_SIZE=10", "BULKD_RATE_LIMIT=1000",
		"BULKD_REDIRECT_CHECKS=true", "BULKD_HTTP_PROXY="+h.webURL)

	for _, u := range []string{"http://" + healthAddr + "/healthz", "http://" + healthAddr + "/readyz", "http://" + apiAddr + "/healthz"} {
		waitHTTP(t, u, "")
	}
	waitHTTP(t, "http://"+metricsAddr+"/metrics", "controller_runtime_")
	// The apiserver's /metrics is on its own listener only (issue 18).
	waitHTTP(t, "http://"+apiMetricsAddr+"/metrics", "bulkd_http_requests_total")
	if res, err := (&http.Client{Timeout: 10 * time.Second}).Get("http://" + apiAddr + "/metrics"); err != nil || res.StatusCode != http.StatusNotFound {
		t.Fatalf("apiserver /metrics on the API address: %v %v", res, err)
	} else {
		res.Body.Close()
	}

	_, key := h.account(t, credits.Whole(100))
	a := api{T: t, URL: "http://" + apiAddr}
	rows := []in{co(2), co(3), dom("northwind.example"), co(2)}
	sub := a.Submit(key, rows)
	h.bulkJob(t, sub.JobID) // made by the apiserver process
	st := a.Wait(key, sub.JobID, 60*time.Second)
	if st.TotalProcessed != 4 || st.Summary["total_found"] != 3 {
		t.Fatalf("status %+v", st)
	}
	sameResults(t, a.Results(key, sub.JobID), h.kubeAPI(t).Results(key, sub.JobID))

	for _, p := range []*exec.Cmd{apiProc, ctrlProc} {
		_ = p.Process.Signal(syscall.SIGTERM)
		done := make(chan error, 1)
		go func() { done <- p.Wait() }()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("%s: exit after SIGTERM: %v", p.Args[1], err)
			}
		case <-time.After(20 * time.Second):
			_ = p.Process.Kill()
			t.Errorf("%s did not stop on SIGTERM", p.Args[1])
		}
	}
}

// startBinary runs the bulkd binary as an envtest user already bound to
// its role (see userWithRole).
func (h *harness) startBinary(t *testing.T, user string, args []string, env ...string) *exec.Cmd {
	t.Helper()
	u, err := h.env.AddUser(envtest.User{Name: user}, nil)
	if err != nil {
		t.Fatal(err)
	}
	kc, err := u.Kubectl()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(h.bin, args...)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.TempDir(), "BULKD_LOG_FORMAT=text",
		"BULKD_KUBECONFIG=" + strings.TrimPrefix(kc.Opts[0], "--kubeconfig=")}, env...)
	if testing.Verbose() {
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	return cmd
}

// waitHTTP polls url until it answers 200 (with body containing want).
func waitHTTP(t *testing.T, url, want string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		res, err := http.Get(url)
		var last string
		if err == nil {
			b, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode == http.StatusOK && strings.Contains(string(b), want) {
				return
			}
			last = fmt.Sprintf("%d %.200s", res.StatusCode, b)
		} else {
			last = err.Error()
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s does not answer: %s", url, last)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
