package soak

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/bulkd/bulkd/internal/testredis"
)

// replica is one `bulkd serve` process on a fixed loopback port. It keeps
// its port and --instance-id across restarts, as a supervisor restarting it
// in place would, so a restarted replica takes back the shard leases its
// previous life held.
type replica struct {
	name string // "r0", "r1": also its --instance-id suffix
	addr string
	bin  string
	args []string
	log  string // log file (stdout and stderr), appended across lives

	mu      sync.Mutex
	cmd     *exec.Cmd
	exited  chan struct{}
	starts  int
	killedC chan struct{} // closed when the current life is killed by the suite
}

func newReplica(name, bin, dir string, common []string) (*replica, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	// No metrics listener: two replicas on one host would both want
	// the default address, and the suite reads none.
	args := append([]string{"serve", "--listen", addr, "--metrics-listen", "0", "--instance-id", "soak-" + name}, common...)
	return &replica{name: name, addr: addr, bin: bin, args: args, log: filepath.Join(dir, "bulkd-"+name+".log")}, nil
}

func (r *replica) base() string { return "http://" + r.addr }

// start launches the process and waits until /readyz answers 200.
func (r *replica) start(ctx context.Context, wait time.Duration) error {
	f, err := os.OpenFile(r.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("replica %s log: %w", r.name, err)
	}
	cmd := exec.Command(r.bin, r.args...)
	// Only our flags configure it: no BULKD_* or proxy variables from the
	// environment of whoever runs the suite.
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(k, "BULKD_") && !strings.HasSuffix(strings.ToUpper(k), "_PROXY") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("start replica %s: %w", r.name, err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); f.Close(); close(exited) }()
	r.mu.Lock()
	r.cmd, r.exited, r.killedC = cmd, exited, make(chan struct{})
	r.starts++
	r.mu.Unlock()
	hc := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(wait)
	for {
		select {
		case <-exited:
			return fmt.Errorf("replica %s exited at start; log %s:\n%s", r.name, r.log, tailFile(r.log, 2000))
		case <-ctx.Done():
			return ctx.Err()
		default:
		}
		if res, err := hc.Get(r.base() + "/readyz"); err == nil {
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("replica %s not ready within %s; log %s:\n%s", r.name, wait, r.log, tailFile(r.log, 2000))
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// kill9 SIGKILLs the process and waits for it: no graceful shutdown, no
// lease released, in-flight requests cut.
func (r *replica) kill9() error {
	r.mu.Lock()
	cmd, exited, killed := r.cmd, r.exited, r.killedC
	r.cmd = nil
	r.mu.Unlock()
	if cmd == nil {
		return fmt.Errorf("replica %s is not running", r.name)
	}
	close(killed)
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		return fmt.Errorf("kill replica %s: %w", r.name, err)
	}
	<-exited
	return nil
}

// stop ends the process gracefully (SIGTERM), killing it after wait.
func (r *replica) stop(wait time.Duration) {
	r.mu.Lock()
	cmd, exited := r.cmd, r.exited
	r.cmd = nil
	r.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(wait):
		_ = cmd.Process.Kill()
		<-exited
	}
}

// running says whether the process is up, and whether it died on its own
// (not by the suite's hand).
func (r *replica) running() (up bool, crashed bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cmd == nil {
		return false, false
	}
	select {
	case <-r.exited:
		return false, true
	default:
		return true, false
	}
}

// pid is the current process id (0 when down).
func (r *replica) pid() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cmd == nil {
		return 0
	}
	return r.cmd.Process.Pid
}

func freeAddr() (string, error) {
	port, err := testredis.FreePort()
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("127.0.0.1:%d", port), nil
}

func tailFile(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// buildBulkd builds cmd/bulkd from the module root into dir.
func buildBulkd(dir string) (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", errors.New("not inside the bulkd module")
	}
	bin := filepath.Join(dir, "bulkd")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/bulkd")
	cmd.Dir = filepath.Dir(mod)
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/bulkd: %w\n%s", err, b)
	}
	return bin, nil
}
