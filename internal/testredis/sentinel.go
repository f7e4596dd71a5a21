package testredis

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// StartSentinel starts a Redis Sentinel (redis-server --sentinel) on a free
// loopback port that monitors master under name, and waits until it
// reports the master. It stops when tb ends.
func StartSentinel(tb testing.TB, master *Server, name string) *Server {
	tb.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		tb.Fatalf("testredis: redis-server not found: %v", err)
	}
	dir := tb.TempDir()
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		port, err := FreePort()
		if err != nil {
			tb.Fatal(err)
		}
		s, err := launchSentinel(bin, dir, port, master, name)
		if err == nil {
			tb.Cleanup(s.Stop)
			return s
		}
		lastErr = err
	}
	tb.Fatalf("testredis: sentinel: %v", lastErr)
	return nil
}

func launchSentinel(bin, dir string, port int, master *Server, name string) (*Server, error) {
	conf := filepath.Join(dir, fmt.Sprintf("sentinel-%d.conf", port))
	logPath := filepath.Join(dir, fmt.Sprintf("sentinel-%d.log", port))
	host, mport, err := net.SplitHostPort(master.Addr)
	if err != nil {
		return nil, err
	}
	body := fmt.Sprintf("bind 127.0.0.1\nport %d\ndir %s\nlogfile %s\ndaemonize no\n"+
		"sentinel monitor %s %s %s 1\nsentinel down-after-milliseconds %s 5000\n", port, dir, logPath, name, host, mport, name)
	if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, conf, "--sentinel")
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start sentinel: %w", err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	s := &Server{Addr: addr, URL: "redis+sentinel://" + addr + "/" + name, cmd: cmd, dir: dir}
	c := redis.NewSentinelClient(&redis.Options{Addr: addr, DialTimeout: 200 * time.Millisecond})
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		got, err := c.GetMasterAddrByName(ctx, name).Result()
		cancel()
		if err == nil && len(got) == 2 && got[0]+":"+got[1] == master.Addr {
			return s, nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.Stop()
	b, _ := os.ReadFile(logPath)
	return nil, fmt.Errorf("sentinel on %s did not report master %s: %s", addr, name, lastLines(string(b), 5))
}
