package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"time"
)

type children struct {
	mu     sync.Mutex
	procs  map[string]*exec.Cmd
	exited map[string]chan struct{}
	order  []string
}

func (c *children) start(dir, name, bin string, args ...string) error {
	f, err := os.Create(filepath.Join(dir, name+".log"))
	if err != nil {
		return err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("start %s: %w", name, err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); f.Close(); close(exited) }()
	// A process that dies at once (a bad flag) is an error now, with its log.
	select {
	case <-exited:
		b, _ := os.ReadFile(filepath.Join(dir, name+".log"))
		return fmt.Errorf("%s exited at start: %s", name, tail(string(b), 3000))
	case <-time.After(2 * time.Second):
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.procs == nil {
		c.procs, c.exited = map[string]*exec.Cmd{}, map[string]chan struct{}{}
	}
	c.procs[name], c.exited[name] = cmd, exited
	c.order = append(c.order, name)
	return nil
}

func (c *children) pid(name string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if p := c.procs[name]; p != nil {
		return p.Process.Pid
	}
	return 0
}

// stop ends the children, last started first.
func (c *children) stop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := len(c.order) - 1; i >= 0; i-- {
		name := c.order[i]
		_ = c.procs[name].Process.Signal(os.Interrupt)
		select {
		case <-c.exited[name]:
		case <-time.After(10 * time.Second):
			_ = c.procs[name].Process.Kill()
			<-c.exited[name]
		}
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

func waitHTTP(ctx context.Context, url string, d time.Duration) error {
	hc := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(d)
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		res, err := hc.Do(req)
		if err == nil {
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not answering after %s: %v", url, d, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}
