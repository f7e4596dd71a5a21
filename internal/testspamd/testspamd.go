// Package testspamd starts a private SpamAssassin spamd for a test on a free
// loopback port: local tests only (-L: no DNS blocklists, no network
// lookups that could hang a test), no user configuration (-x), no Bayes
// learning, logs in the test's directory. A test can stop it, start it
// again on the same port, and freeze it (SIGSTOP) to play a spamd that
// accepts connections but never answers.
package testspamd

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/bulkd/bulkd/internal/spamc"
	"github.com/bulkd/bulkd/internal/testredis"
)

// Server is one spamd (a parent and its preforked children, in a process
// group of their own).
type Server struct {
	Addr     string
	Port     int
	Children int
	dir      string
	bin      string
	log      string
	args     []string // StartWith's; nil: Args

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
}

// Binary finds spamd: PATH first, then /usr/sbin (not in every user's PATH).
func Binary() (string, error) {
	if p, err := exec.LookPath("spamd"); err == nil {
		return p, nil
	}
	if _, err := os.Stat("/usr/sbin/spamd"); err == nil {
		return "/usr/sbin/spamd", nil
	}
	return "", errors.New("spamd not found in PATH or /usr/sbin")
}

// Start launches a spamd with children preforked workers for tb and stops
// it when the test ends. Without spamd the test fails when we are root (so
// `make deps`, which `make test` runs, would have installed it: a missing
// engine there is a bug, not a reason to skip) and is skipped otherwise,
// with what to install.
func Start(tb testing.TB, children int) *Server {
	tb.Helper()
	s, err := StartProcess(tb.TempDir(), children)
	return started(tb, s, err, nil)
}

// StartWith launches spamd with exactly args, which must make it listen on
// addr (a free loopback port: testredis.FreePort), for tb, as Start does:
// skipped or failed without spamd, stopped when the test ends. It is for
// checking arguments of our own (the chart's); Args are the usual ones.
func StartWith(tb testing.TB, addr string, args []string) *Server {
	tb.Helper()
	bin, err := Binary()
	if err != nil {
		return started(tb, nil, &NotInstalledError{err}, args)
	}
	dir := tb.TempDir()
	s := &Server{Addr: addr, dir: dir, bin: bin, log: filepath.Join(dir, "spamd.log"), args: args}
	return started(tb, s, s.launch(), args)
}

// started ends tb on err (a skip when spamd is missing and we are not
// root, see Start) or has s stopped when it ends.
func started(tb testing.TB, s *Server, err error, args []string) *Server {
	tb.Helper()
	if err != nil {
		var nf *NotInstalledError
		if errors.As(err, &nf) && os.Geteuid() != 0 {
			tb.Skipf("testspamd: %v", err)
		}
		if args != nil {
			tb.Fatalf("testspamd: spamd %v: %v", args, err)
		}
		tb.Fatalf("testspamd: %v", err)
	}
	tb.Cleanup(s.Stop)
	return s
}

// NotInstalledError says spamd is missing and how to get it.
type NotInstalledError struct{ err error }

func (e *NotInstalledError) Error() string {
	return "SpamAssassin's spamd is not installed (" + e.err.Error() +
		"): run `make deps` as root, or apt-get install spamassassin spamd"
}

// StartProcess starts a spamd outside of a test (loadgen, TestMain). The
// caller must call Stop.
func StartProcess(dir string, children int) (*Server, error) {
	bin, err := Binary()
	if err != nil {
		return nil, &NotInstalledError{err}
	}
	if children < 1 {
		children = 1
	}
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		port, err := testredis.FreePort()
		if err != nil {
			return nil, err
		}
		s := &Server{Addr: fmt.Sprintf("127.0.0.1:%d", port), Port: port, Children: children, dir: dir, bin: bin,
			log: filepath.Join(dir, fmt.Sprintf("spamd-%d.log", port))}
		if lastErr = s.launch(); lastErr == nil {
			return s, nil
		}
	}
	return nil, lastErr
}

// Args are spamd's arguments for a private instance on addr: what tests,
// `make run` (hack/ensure-spamd.sh's caller) and the load generator run.
func Args(addr string, children int, pidfile string) []string {
	args := []string{
		"--listen", addr,
		"--allowed-ips", "127.0.0.1",
		"--max-children", fmt.Sprint(children),
		"--min-children", fmt.Sprint(children),
		"--min-spare", "0",
		"--max-spare", fmt.Sprint(children),
		"--local",         // no DNS or network tests: deterministic, and nothing to hang on
		"--nouser-config", // the same rules for everyone
		"--syslog", "stderr",
		"--pidfile", pidfile,
		"--cf", "use_bayes 0", // no learning: a score depends on the message alone
		"--cf", "bayes_auto_learn 0",
	}
	if os.Geteuid() == 0 {
		// spamd will not scan as root; nobody owns nothing it could harm.
		args = append(args, "--username", "nobody")
	}
	return args
}

func (s *Server) launch() error {
	logf, err := os.OpenFile(s.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	args := s.args
	if args == nil {
		args = Args(s.Addr, s.Children, filepath.Join(s.dir, fmt.Sprintf("spamd-%d.pid", s.Port)))
	}
	cmd := exec.Command(s.bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = append(os.Environ(), "HOME="+s.dir) // nothing of the user's is read or written
	// A process group of its own: Stop and Freeze reach the children too.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start spamd: %w", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	s.mu.Lock()
	s.cmd, s.exited = cmd, exited
	s.mu.Unlock()

	// Loading the rules takes a few seconds (about 4 s on a 2-core
	// machine); a busy CI machine gets more.
	c := &spamc.Client{Addr: s.Addr, Timeout: time.Second}
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			return fmt.Errorf("spamd on %s exited at start: %s", s.Addr, s.LogTail(8))
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := c.Ping(ctx)
		cancel()
		if err == nil {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	s.Stop()
	return fmt.Errorf("spamd on %s did not answer PING within 60 s: %s", s.Addr, s.LogTail(8))
}

// Stop terminates spamd and its children and waits for them; safe to call
// more than once.
func (s *Server) Stop() {
	s.mu.Lock()
	cmd, exited := s.cmd, s.exited
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil || cmd.Process == nil {
		return
	}
	pgid := cmd.Process.Pid
	_ = syscall.Kill(-pgid, syscall.SIGCONT) // a frozen spamd cannot act on SIGTERM
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
	}
	// Children that outlived the parent (or a parent that hung) go now.
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	<-exited
}

// Restart starts spamd again on the same port after Stop.
func (s *Server) Restart() error {
	var err error
	for attempt := 0; attempt < 20; attempt++ {
		if err = s.launch(); err == nil {
			return nil
		}
		// The port may linger a moment after the old spamd's exit.
		time.Sleep(250 * time.Millisecond)
	}
	return err
}

// Freeze stops spamd's processes (SIGSTOP): the kernel still accepts
// connections into the listen backlog, but nothing answers: a spamd too
// slow to be of use. Thaw resumes it.
func (s *Server) Freeze() error { return s.signal(syscall.SIGSTOP) }

// Thaw resumes a frozen spamd.
func (s *Server) Thaw() error { return s.signal(syscall.SIGCONT) }

func (s *Server) signal(sig syscall.Signal) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return errors.New("spamd is not running")
	}
	return syscall.Kill(-s.cmd.Process.Pid, sig)
}

// LogTail is the last n lines of spamd's log.
func (s *Server) LogTail(n int) string {
	b, _ := os.ReadFile(s.log)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
