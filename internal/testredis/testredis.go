// Package testredis starts a private redis-server for a test on a free
// loopback port, so tests never share state with each other or with the
// machine's own Redis. The server keeps nothing on disk and is stopped when
// the test ends.
package testredis

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Server is one running redis-server process.
type Server struct {
	Addr string
	URL  string
	cmd  *exec.Cmd
	dir  string
}

// Start launches a redis-server for t and registers its shutdown with
// t.Cleanup. It fails the test when redis-server is not installed: the
// Makefile installs it (`make deps`), and a test that silently skipped would
// prove nothing.
func Start(tb testing.TB) *Server {
	tb.Helper()
	s, err := StartProcess(tb.TempDir())
	if err != nil {
		tb.Fatalf("testredis: %v", err)
	}
	tb.Cleanup(s.Stop)
	return s
}

// Client starts a server for t and returns a client connected to it.
func Client(tb testing.TB) (*redis.Client, *Server) {
	tb.Helper()
	s := Start(tb)
	c := redis.NewClient(&redis.Options{Addr: s.Addr, PoolSize: 64})
	tb.Cleanup(func() { _ = c.Close() })
	return c, s
}

// StartProcess starts a redis-server outside of a test (used by TestMain
// functions and benchmarks). The caller must call Stop.
func StartProcess(dir string) (*Server, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("redis-server not found in PATH (install Debian package redis-server, or run `make deps`): %w", err)
	}
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		port, err := FreePort()
		if err != nil {
			return nil, err
		}
		s, err := launch(bin, dir, port, nil)
		if err == nil {
			return s, nil
		}
		lastErr = err
	}
	return nil, lastErr
}

// launch starts redis-server on port with extra arguments appended (cluster
// mode) and waits until it answers PING.
func launch(bin, dir string, port int, extra []string) (*Server, error) {
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	logPath := filepath.Join(dir, fmt.Sprintf("redis-%d.log", port))
	cmd := exec.Command(bin, serverArgs(port, dir, logPath, extra...)...)
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start redis-server: %w", err)
	}
	s := &Server{Addr: addr, URL: "redis://" + addr + "/0", cmd: cmd, dir: dir}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if ping(addr) == nil {
			return s, nil
		}
		if cmd.ProcessState != nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	s.Stop()
	b, _ := os.ReadFile(logPath)
	return nil, fmt.Errorf("redis-server on %s did not become ready: %s", addr, lastLines(string(b), 5))
}

// serverArgs are the arguments of a private redis-server on a loopback
// port, its files in dir, no persistence; extra follow (a later option
// wins over an earlier one).
func serverArgs(port int, dir, logPath string, extra ...string) []string {
	return append([]string{
		"--bind", "127.0.0.1",
		"--port", fmt.Sprint(port),
		"--save", "",
		"--appendonly", "no",
		"--dir", dir,
		"--logfile", logPath,
		"--daemonize", "no",
		"--protected-mode", "yes",
	}, extra...)
}

func ping(addr string) error {
	c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if !strings.HasPrefix(line, "+PONG") {
		return fmt.Errorf("unexpected reply %q", line)
	}
	return nil
}

// Stop kills the server; it is safe to call more than once.
func (s *Server) Stop() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	_, _ = s.cmd.Process.Wait()
	s.cmd = nil
}

// FlushAll empties the server; handy between sub-tests sharing a server.
func (s *Server) FlushAll(ctx context.Context) error {
	c := redis.NewClient(&redis.Options{Addr: s.Addr})
	defer c.Close()
	return c.FlushAll(ctx).Err()
}

// FreePort is a loopback TCP port nobody listens on right now (the
// kernel's pick; a process started on it may still lose a race for it).
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}
