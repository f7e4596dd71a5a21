package chart

// The content spam check's engine in the chart: the API gets spamd's
// address (an operator's spamd, or the chart's own Deployment when an image
// is given), and the chart's spamd is rendered, linted, dry-run applied,
// and its rendered arguments run by a real spamd.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v4/pkg/chart/v2/lint"
	"helm.sh/helm/v4/pkg/chart/v2/lint/support"

	"github.com/bulkd/bulkd/internal/spamc"
	"github.com/bulkd/bulkd/internal/testredis"
	"github.com/bulkd/bulkd/internal/testspamd"
)

func apiserverEnv(t *testing.T, r *rendered) map[string]map[string]any {
	t.Helper()
	return envOf(containers(t, r.get(t, "Deployment", "bulkd-apiserver"))[0])
}

func TestChartSpamd(t *testing.T) {
	const ns = "chart-spamd"
	// Default: no spamd anywhere; the API has the timeout and connection
	// settings but no address (the endpoint answers 503 engine_unavailable).
	def, err := render(t, "bulkd", ns, nil)
	if err != nil {
		t.Fatal(err)
	}
	env := apiserverEnv(t, def)
	if _, ok := env["BULKD_SPAMD_ADDR"]; ok || env["BULKD_SPAMD_TIMEOUT"]["value"] != "10s" || env["BULKD_SPAMD_MAX_CONNS"]["value"] != "5" {
		t.Errorf("default spam check env %v", env)
	}
	if def.find("Deployment", "bulkd-spamd") != nil || def.find("Service", "bulkd-spamd") != nil {
		t.Error("a spamd was rendered without an image")
	}

	// An operator's spamd.
	ext, err := render(t, "bulkd", ns, parseValues(t, `
spamd: {address: "spamd.mail.svc:783", timeout: 3s, maxConns: 8, allowances: "payg=20,starter=300"}
`))
	if err != nil {
		t.Fatal(err)
	}
	env = apiserverEnv(t, ext)
	for k, want := range map[string]string{"BULKD_SPAMD_ADDR": "spamd.mail.svc:783", "BULKD_SPAMD_TIMEOUT": "3s",
		"BULKD_SPAMD_MAX_CONNS": "8", "BULKD_SPAM_CHECK_ALLOWANCES": "payg=20,starter=300"} {
		if env[k]["value"] != want {
			t.Errorf("%s = %v, want %s", k, env[k]["value"], want)
		}
	}
	if ext.find("Deployment", "bulkd-spamd") != nil {
		t.Error("a spamd Deployment was rendered for an external address")
	}

	// The chart's own spamd.
	vals := parseValues(t, `
spamd:
  address: "ignored:783"
  server:
    image: {repository: registry.example/spamassassin, tag: "4.0.1"}
    replicas: 2
    maxChildren: 3
    extraArgs: ["--cf=required_score 6.0"]
`)
	linted := lint.RunAll(chartDir, vals, ns, lint.WithKubeVersion(kubeVer(t)))
	for _, m := range linted.Messages {
		if m.Severity >= support.WarningSev {
			t.Errorf("helm lint: %s", m.Error())
		}
	}
	r, err := render(t, "bulkd", ns, vals)
	if err != nil {
		t.Fatal(err)
	}
	if got := apiserverEnv(t, r)["BULKD_SPAMD_ADDR"]["value"]; got != "bulkd-spamd:783" {
		t.Errorf("BULKD_SPAMD_ADDR %v, want the chart's Service bulkd-spamd:783", got)
	}
	dep := r.get(t, "Deployment", "bulkd-spamd")
	if n := nested(t, dep, "spec", "replicas"); fmt.Sprint(n) != "2" {
		t.Errorf("replicas %v", n)
	}
	c := containers(t, dep)[0]
	if c["image"] != "registry.example/spamassassin:4.0.1" {
		t.Errorf("image %v", c["image"])
	}
	var args []string
	for _, a := range asSlice(c["args"]) {
		args = append(args, a.(string))
	}
	for _, want := range []string{"--listen=0.0.0.0:783", "--max-children=3", "--local", "--nouser-config", "--cf=use_bayes 0", "--cf=required_score 6.0",
		"--allowed-ips=10.0.0.0/8,172.16.0.0/12,192.168.0.0/16,100.64.0.0/10,fc00::/7"} { // the private ranges, not 0.0.0.0/0
		found := false
		for _, a := range args {
			found = found || a == want
		}
		if !found {
			t.Errorf("spamd args %v lack %s", args, want)
		}
	}
	sc := asMap(c["securityContext"])
	if sc["readOnlyRootFilesystem"] != true || sc["allowPrivilegeEscalation"] != false {
		t.Errorf("spamd securityContext %v", sc)
	}
	pod := asMap(nested(t, dep, "spec", "template", "spec"))
	if asMap(pod["securityContext"])["runAsNonRoot"] != true || pod["automountServiceAccountToken"] != false {
		t.Errorf("spamd pod %v", pod)
	}
	svc := r.get(t, "Service", "bulkd-spamd")
	podLabels := map[string]string{}
	for k, v := range asMap(nested(t, dep, "spec", "template", "metadata", "labels")) {
		podLabels[k], _ = v.(string)
	}
	if !labelsMatch(podLabels, asMap(nested(t, svc, "spec", "selector"))) {
		t.Errorf("Service bulkd-spamd does not select the spamd pods %v", podLabels)
	}
	// The API's selector must not take in spamd pods, nor the reverse.
	apiSel := asMap(nested(t, r.get(t, "Service", "bulkd-apiserver"), "spec", "selector"))
	if labelsMatch(podLabels, apiSel) {
		t.Error("the API Service selects spamd pods")
	}

	// Mistakes are refused at render time.
	for _, tc := range []struct{ values, want string }{
		{`spamd: {address: "no-port"}`, "address"},
		{`spamd: {maxConns: 0}`, "maxConns"},
		{`spamd: {allowances: "gold"}`, "allowances"},
		{`spamd: {server: {maxChildren: 0}}`, "maxChildren"},
	} {
		if _, err := render(t, "bulkd", ns, parseValues(t, tc.values)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("render with %s: %v, want an error naming %s", tc.values, err, tc.want)
		}
	}

	cl := cluster(t)
	ensureNamespace(t, cl, ns)
	dryRunApply(t, cl, r.objs)

	// And arguments spamd itself accepts: the rendered ones, run by the
	// Debian spamd with only the listening address made a free loopback
	// port, answer a check.
	runRenderedSpamd(t, args)
}

func runRenderedSpamd(t *testing.T, args []string) {
	t.Helper()
	port, err := testredis.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	var local []string
	for _, a := range args {
		switch {
		case strings.HasPrefix(a, "--listen="):
			a = "--listen=" + addr
		case strings.HasPrefix(a, "--allowed-ips="):
			// The rendered list (spamd must parse it: IPv6 ranges
			// included) plus this test's loopback client.
			a += ",127.0.0.1"
		}
		local = append(local, a)
	}
	local = append(local, "--pidfile="+filepath.Join(t.TempDir(), "spamd.pid"))
	if os.Geteuid() == 0 {
		local = append(local, "--username=nobody") // the chart's pods are not root; here spamd needs telling
	}
	sd := testspamd.StartWith(t, addr, local) // answers PING when it returns
	c := &spamc.Client{Addr: sd.Addr, Timeout: 5 * time.Second}
	res, err := c.Report(context.Background(), []byte("From: a@example.com\r\nTo: b@example.net\r\nSubject: hi\r\n\r\nhello\r\n"))
	if err != nil {
		t.Fatalf("spamd with the chart's arguments %v does not answer a check: %v\n%s", local, err, sd.LogTail(20))
	}
	if res.Threshold != 6 {
		t.Errorf("threshold %v: --cf=required_score 6.0 not applied", res.Threshold)
	}
}
