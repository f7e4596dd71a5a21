package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/client-go/rest"
)

// profileAPIServer takes a CPU profile of kube-apiserver over the next d
// (its /debug/pprof, on by default, read as the bench's admin) and writes
// it to <dir>/kube-apiserver.pprof: where the API server's core goes while
// the controller works is the question the admission rate turns on.
// It runs in the background; the returned function waits for it.
func (b *bench) profileAPIServer(ctx context.Context, d time.Duration) func() {
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := b.fetchProfile(ctx, d); err != nil {
			b.step("kube-apiserver profile: %v", err)
		}
	}()
	return func() { <-done }
}

func (b *bench) fetchProfile(ctx context.Context, d time.Duration) error {
	cfg := rest.CopyConfig(b.admin)
	cfg.Timeout = d + 30*time.Second
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("%s/debug/pprof/profile?seconds=%d", strings.TrimSuffix(cfg.Host, "/"), int(d.Seconds())), nil)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
		return fmt.Errorf("GET %s: %s: %s", req.URL, resp.Status, body)
	}
	path := filepath.Join(b.o.dir, "kube-apiserver.pprof")
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, io.LimitReader(resp.Body, 256<<20)); err != nil {
		f.Close()
		return err
	}
	b.step("kube-apiserver CPU profile written to %s (go tool pprof -top %s)", path, path)
	return f.Close()
}
