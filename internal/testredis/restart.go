package testredis

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// Durable is a redis-server that keeps its data in an append-only file
// (appendonly yes, appendfsync everysec: what `make run` and the chart run)
// in a directory of the test's, and that a test can stop (SIGTERM or
// SIGKILL) and start again on the same port and data: a Redis restart as
// production sees one.
type Durable struct {
	*Server // Addr and URL; its cmd stays nil (Durable runs the process)
	Port    int
	Dir     string
	bin     string
	log     string
	cmd     *exec.Cmd
	exited  chan struct{} // closed when cmd has exited
}

// StartDurable starts a Durable server for tb; it is killed when the test
// ends.
func StartDurable(tb testing.TB) *Durable {
	tb.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		tb.Fatalf("testredis: redis-server not found in PATH (install Debian package redis-server, or run `make deps`): %v", err)
	}
	d := &Durable{Dir: tb.TempDir(), bin: bin}
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		if d.Port, err = FreePort(); err != nil {
			tb.Fatalf("testredis: %v", err)
		}
		d.log = filepath.Join(d.Dir, fmt.Sprintf("redis-%d.log", d.Port))
		if lastErr = d.launch(10 * time.Second); lastErr == nil {
			tb.Cleanup(func() { _ = d.Kill() })
			return d
		}
	}
	tb.Fatalf("testredis: %v", lastErr)
	return nil
}

// launch starts redis-server on d.Port over d.Dir and waits until it
// answers PING (after loading its append-only file: a loading server
// answers -LOADING, not +PONG).
func (d *Durable) launch(wait time.Duration) error {
	addr := fmt.Sprintf("127.0.0.1:%d", d.Port)
	cmd := exec.Command(d.bin, serverArgs(d.Port, d.Dir, d.log, "--appendonly", "yes", "--appendfsync", "everysec")...)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start redis-server: %w", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	d.Server = &Server{Addr: addr, URL: "redis://" + addr + "/0", dir: d.Dir}
	d.cmd, d.exited = cmd, exited
	deadline := time.Now().Add(wait)
	for time.Now().Before(deadline) {
		if ping(addr) == nil {
			return nil
		}
		select {
		case <-exited:
			d.cmd = nil
			b, _ := os.ReadFile(d.log)
			return fmt.Errorf("redis-server on %s exited at start: %s", addr, lastLines(string(b), 5))
		default:
		}
		time.Sleep(10 * time.Millisecond)
	}
	_ = cmd.Process.Kill()
	<-exited
	d.cmd = nil
	b, _ := os.ReadFile(d.log)
	return fmt.Errorf("redis-server on %s did not become ready: %s", addr, lastLines(string(b), 5))
}

// Terminate stops the server as an orchestrator does (SIGTERM): Redis
// fsyncs its append-only file and exits. It waits for the exit.
func (d *Durable) Terminate() error { return d.signal(syscall.SIGTERM) }

// Kill stops the server with SIGKILL: no shutdown work at all. What the
// append-only file holds is what Redis wrote to it before the kill (it
// writes before it replies; fsync once a second only matters to a machine
// crash, which a test cannot stage).
func (d *Durable) Kill() error { return d.signal(syscall.SIGKILL) }

func (d *Durable) signal(sig syscall.Signal) error {
	if d.cmd == nil {
		return errors.New("testredis: server not running")
	}
	defer func() { d.cmd = nil }()
	if err := d.cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("signal redis-server: %w", err)
	}
	select {
	case <-d.exited:
	case <-time.After(30 * time.Second):
		_ = d.cmd.Process.Kill()
		<-d.exited
		return fmt.Errorf("redis-server did not exit within 30s of %v", sig)
	}
	return nil
}

// Restart starts the server again on the same port and directory, so it
// loads the append-only file its previous life wrote. Clients keep their
// address: this is the same Redis coming back.
func (d *Durable) Restart() error {
	if d.cmd != nil {
		return errors.New("testredis: restart of a running server")
	}
	var err error
	// The port was ours a moment ago; another process could take it in
	// between, which a retry will not fix, but a slow release will.
	for attempt := 0; attempt < 20; attempt++ {
		if err = d.launch(30 * time.Second); err == nil {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return err
}
