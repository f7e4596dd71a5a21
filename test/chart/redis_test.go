package chart

// Redis as bulkd's deployments run it: durable (an append-only file fsynced
// once a second, on storage that outlives the process) and never evicting.
// The chart's own Redis (redis.server.enabled) is rendered, linted,
// dry-run applied, and its rendered redis.conf run by a real redis-server;
// `make run`'s Redis (hack/run-local.sh) is started with the script's own
// flags and restarted with SIGKILL.

import (
	"bufio"
	"context"
	"encoding/base64"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"helm.sh/helm/v4/pkg/chart/v2/lint"
	"helm.sh/helm/v4/pkg/chart/v2/lint/support"

	"github.com/bulkd/bulkd/internal/testredis"
)

// TestChartRedisServer: with redis.server.enabled the chart runs Redis as
// a StatefulSet whose data lives on a PersistentVolumeClaim, with
// appendonly yes, appendfsync everysec and noeviction, and bulkd's Secret
// points at it with its password.
func TestChartRedisServer(t *testing.T) {
	const ns = "chart-redis-server"
	vals := parseValues(t, `
redis:
  server:
    enabled: true
    password: s3cretPassw0rd
    maxmemory: 2gb
    persistence: {size: 20Gi, storageClass: fast-ssd}
`)
	linted := lint.RunAll(chartDir, vals, ns, lint.WithKubeVersion(kubeVer(t)))
	for _, m := range linted.Messages {
		if m.Severity >= support.WarningSev {
			t.Errorf("helm lint: %s", m.Error())
		}
	}
	r, err := render(t, "bulkd", ns, vals)
	if err != nil {
		t.Fatalf("render: %v", err)
	}
	checkCommon(t, r, scenario{name: "redis-server", release: "bulkd", namespace: ns})

	// The rendered configuration.
	cm := r.get(t, "ConfigMap", "bulkd-redis")
	conf := nestedString(t, cm, "data", "redis.conf")
	settings := map[string]string{}
	for _, line := range strings.Split(conf, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), " "); ok {
			settings[k] = v
		}
	}
	for k, want := range map[string]string{"appendonly": "yes", "appendfsync": "everysec", "dir": "/data",
		"maxmemory-policy": "noeviction", "maxmemory": "2gb", "save": `""`} {
		if settings[k] != want {
			t.Errorf("redis.conf %s = %q, want %q\n%s", k, settings[k], want, conf)
		}
	}

	// The data directory is a claim of its own that outlives the pod.
	sts := r.get(t, "StatefulSet", "bulkd-redis")
	claims := asSlice(nested(t, sts, "spec", "volumeClaimTemplates"))
	if len(claims) != 1 {
		t.Fatalf("%d volumeClaimTemplates, want 1", len(claims))
	}
	claim := asMap(claims[0])
	cspec := asMap(claim["spec"])
	if asMap(claim["metadata"])["name"] != "data" || cspec["storageClassName"] != "fast-ssd" ||
		asMap(asMap(cspec["resources"])["requests"])["storage"] != "20Gi" {
		t.Errorf("volume claim %v", claim)
	}
	c := containers(t, sts)[0]
	mounts := map[string]string{}
	for _, m := range asSlice(c["volumeMounts"]) {
		mounts[asMap(m)["mountPath"].(string)] = asMap(m)["name"].(string)
	}
	if mounts["/data"] != "data" || mounts["/etc/redis"] != "config" {
		t.Errorf("redis mounts %v: /data must be the claim", mounts)
	}
	cmd := fmt.Sprint(c["command"])
	if !strings.Contains(cmd, "/etc/redis/redis.conf") || !strings.Contains(cmd, "$(REDIS_PASSWORD)") {
		t.Errorf("redis command %s", cmd)
	}
	if n, k := secretRef(envOf(c)["REDIS_PASSWORD"]); n != "bulkd-redis" || k != "redis-password" {
		t.Errorf("REDIS_PASSWORD from %s/%s", n, k)
	}
	if g := nested(t, sts, "spec", "template", "spec", "terminationGracePeriodSeconds"); fmt.Sprint(g) != "60" {
		t.Errorf("terminationGracePeriodSeconds %v: Redis needs time to write its file on SIGTERM", g)
	}
	sc := asMap(c["securityContext"])
	if sc["readOnlyRootFilesystem"] != true || sc["allowPrivilegeEscalation"] != false {
		t.Errorf("redis securityContext %v", sc)
	}

	// bulkd's Secret: the URL of this Redis, with its password.
	sec := r.get(t, "Secret", "bulkd-redis")
	url, _ := base64.StdEncoding.DecodeString(nestedString(t, sec, "data", "redis-url"))
	pw, _ := base64.StdEncoding.DecodeString(nestedString(t, sec, "data", "redis-password"))
	if string(url) != "redis://:s3cretPassw0rd@bulkd-redis:6379/0" || string(pw) != "s3cretPassw0rd" {
		t.Errorf("secret url %q password %q", url, pw)
	}
	svc := r.get(t, "Service", "bulkd-redis")
	sel := asMap(nested(t, svc, "spec", "selector"))
	podLabels := map[string]string{}
	for k, v := range asMap(nested(t, sts, "spec", "template", "metadata", "labels")) {
		podLabels[k], _ = v.(string)
	}
	if !labelsMatch(podLabels, sel) {
		t.Errorf("Service bulkd-redis selects %v, the pods are %v", sel, podLabels)
	}

	if !strings.Contains(r.notes, "statefulset/bulkd-redis") {
		t.Errorf("NOTES.txt does not name the chart's Redis:\n%s", r.notes)
	}

	// A generated password, when none is given: the same in the URL and
	// in the password key.
	r2, err := render(t, "bulkd", ns, parseValues(t, "redis: {server: {enabled: true}}"))
	if err != nil {
		t.Fatal(err)
	}
	sec2 := r2.get(t, "Secret", "bulkd-redis")
	url2, _ := base64.StdEncoding.DecodeString(nestedString(t, sec2, "data", "redis-url"))
	pw2, _ := base64.StdEncoding.DecodeString(nestedString(t, sec2, "data", "redis-password"))
	if len(pw2) != 32 || string(url2) != "redis://:"+string(pw2)+"@bulkd-redis:6379/0" {
		t.Errorf("generated: url %q password %q", url2, pw2)
	}

	// The default: no Redis of the chart's own.
	def, err := render(t, "bulkd", ns, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(def.ofKind("StatefulSet")) != 0 || def.find("Service", "bulkd-redis") != nil {
		t.Error("a Redis was rendered without redis.server.enabled")
	}

	// Mistakes are refused at render time.
	for _, tc := range []struct{ values, want string }{
		{"redis: {server: {enabled: true}, existingSecret: mine}", "existingSecret"},
		{"redis: {server: {appendfsync: \"no\"}}", "appendfsync"},
		{"redis: {server: {persistence: {size: \"\", accessModes: [ReadWriteOnce]}}}", "size"},
	} {
		if _, err := render(t, "bulkd", ns, parseValues(t, tc.values)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("render with %s: %v, want an error naming %s", tc.values, err, tc.want)
		}
	}

	// Valid Kubernetes objects.
	cl := cluster(t)
	ensureNamespace(t, cl, ns)
	dryRunApply(t, cl, r.objs)

	// And a configuration Redis itself accepts: the rendered redis.conf,
	// run by redis-server with only the data directory moved.
	srv := startRedis(t, filepath.Join(t.TempDir(), "data"), func(dir string, port int) []string {
		confPath := filepath.Join(dir, "redis.conf")
		// Redis changes into dir as it reads the file: /data is moved to
		// the test's directory there, the only line changed.
		local := strings.Replace(conf, "\ndir /data\n", "\ndir "+dir+"\n", 1)
		if err := os.WriteFile(confPath, []byte(local), 0o600); err != nil {
			t.Fatal(err)
		}
		return []string{confPath, "--port", fmt.Sprint(port), "--bind", "127.0.0.1", "--dir", dir, "--maxmemory", "64mb",
			"--requirepass", string(pw)}
	})
	srv.checkDurable(t, string(pw), "64mb")
}

// TestRunLocalRedisIsDurable: the redis-server `make run` starts (flags
// read from hack/run-local.sh) keeps what it acknowledged across a SIGKILL
// and restart, and runs with appendonly yes, appendfsync everysec and
// noeviction.
func TestRunLocalRedisIsDurable(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repoRoot, "hack", "run-local.sh"))
	if err != nil {
		t.Fatal(err)
	}
	// The redis-server command line, its continuation lines joined.
	var cmdline string
	lines := strings.Split(string(b), "\n")
	for i := 0; i < len(lines); i++ {
		l := strings.TrimSpace(lines[i])
		if !strings.HasPrefix(l, "redis-server ") {
			continue
		}
		for strings.HasSuffix(l, "\\") && i+1 < len(lines) {
			i++
			l = strings.TrimSuffix(l, "\\") + " " + strings.TrimSpace(lines[i])
		}
		cmdline = l
		break
	}
	if cmdline == "" {
		t.Fatal("no redis-server command in hack/run-local.sh")
	}
	dataDir := filepath.Join(t.TempDir(), "var", "redis")
	srv := startRedis(t, dataDir, func(dir string, port int) []string {
		args := strings.Fields(strings.TrimSuffix(cmdline, ">/dev/null"))[1:]
		for i, a := range args {
			a = strings.Trim(a, `"`)
			a = strings.ReplaceAll(a, "$PWD/var/redis", dir)
			a = strings.ReplaceAll(a, "$port", fmt.Sprint(port))
			args[i] = a
		}
		// In the foreground, so the test owns the process.
		for i := range args {
			if args[i] == "--daemonize" && i+1 < len(args) {
				args[i+1] = "no"
			}
		}
		return args
	})
	srv.checkDurable(t, "", "")
}

// redisProc is a redis-server a test started from a deployment's own
// configuration.
type redisProc struct {
	dir  string
	port int
	args func(dir string, port int) []string
	cmd  *exec.Cmd
	done chan struct{}
}

func startRedis(t *testing.T, dir string, args func(dir string, port int) []string) *redisProc {
	t.Helper()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	port, err := testredis.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	p := &redisProc{dir: dir, port: port, args: args}
	p.start(t)
	t.Cleanup(func() { p.stop(syscall.SIGKILL) })
	return p
}

func (p *redisProc) start(t *testing.T) {
	t.Helper()
	args := p.args(p.dir, p.port)
	p.cmd = exec.Command("redis-server", args...)
	out, _ := p.cmd.StdoutPipe()
	p.cmd.Stderr = p.cmd.Stdout
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("redis-server %v: %v", args, err)
	}
	p.done = make(chan struct{})
	var log strings.Builder
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			log.WriteString(sc.Text() + "\n")
		}
		_ = p.cmd.Wait()
		close(p.done)
	}()
	deadline := time.Now().Add(15 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", p.port), 100*time.Millisecond)
		if err == nil {
			c.Close()
			return
		}
		select {
		case <-p.done:
			t.Fatalf("redis-server %v exited: %s", args, log.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("redis-server %v not listening", args)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (p *redisProc) stop(sig syscall.Signal) {
	if p.cmd == nil || p.cmd.Process == nil {
		return
	}
	_ = p.cmd.Process.Signal(sig)
	<-p.done
	p.cmd = nil
}

// checkDurable checks the running configuration, then that a write
// survives SIGKILL and a restart with the same configuration.
func (p *redisProc) checkDurable(t *testing.T, password, maxmemory string) {
	t.Helper()
	ctx := context.Background()
	client := func() *redis.Client {
		return redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", p.port), Password: password, MaxRetries: 20})
	}
	c := client()
	defer c.Close()
	want := map[string]string{"appendonly": "yes", "appendfsync": "everysec", "maxmemory-policy": "noeviction", "dir": p.dir}
	if maxmemory != "" {
		want["maxmemory"] = "67108864"
	}
	for k, v := range want {
		got, err := c.ConfigGet(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		if got[k] != v {
			t.Errorf("CONFIG GET %s = %q, want %q", k, got[k], v)
		}
	}
	if err := c.Set(ctx, "bulkd:durable", "yes", 0).Err(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1100 * time.Millisecond) // appendfsync everysec
	p.stop(syscall.SIGKILL)
	p.start(t)
	c2 := client()
	defer c2.Close()
	var v string
	var err error
	for range 100 { // a loading server answers -LOADING
		if v, err = c2.Get(ctx, "bulkd:durable").Result(); err == nil || !strings.HasPrefix(err.Error(), "LOADING") {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if v != "yes" || err != nil {
		t.Errorf("after SIGKILL and restart: %q %v", v, err)
	}
}
