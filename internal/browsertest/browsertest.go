// Package browsertest runs Debian's Chromium headless for a test, driven by
// chromedp: the dashboard's tests sign in, click and read pages the way a
// person does. Each browser gets its own profile directory (no state is
// shared between tests) and is killed when the test ends.
package browsertest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
)

// Binary finds Chromium: $BULKD_CHROMIUM, then chromium and chromium-browser
// on PATH (Debian's package installs /usr/bin/chromium).
func Binary() (string, error) {
	if p := os.Getenv("BULKD_CHROMIUM"); p != "" {
		return exec.LookPath(p)
	}
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p, nil
		}
	}
	return "", errors.New("chromium not found (BULKD_CHROMIUM, chromium, chromium-browser)")
}

// Browser is one headless Chromium.
type Browser struct {
	t      testing.TB
	ctx    context.Context
	cancel context.CancelFunc
	// Shots is where Screenshot writes (the test's output directory:
	// $BULKD_SCREENSHOTS when set, else a temporary directory).
	Shots string
	// weights counts the bytes received (ResetWeight, Transferred).
	weights *weights
}

// Start launches a headless Chromium for tb. Without Chromium the test
// fails when we are root (`make deps`, which `make test` runs, installs
// it: a missing browser there is a bug) and is skipped otherwise, with what
// to install.
func Start(tb testing.TB) *Browser {
	tb.Helper()
	bin, err := Binary()
	if err != nil {
		msg := err.Error() + ": run `make deps` as root, or apt-get install chromium"
		if os.Geteuid() == 0 {
			tb.Fatal(msg)
		}
		tb.Skip(msg)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(bin),
		chromedp.UserDataDir(tb.TempDir()),
		chromedp.NoSandbox, // root in CI; the pages are our own
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.WindowSize(1280, 900),
	)
	actx, acancel := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx, chromedp.WithLogf(func(string, ...any) {}))
	b := &Browser{t: tb, ctx: ctx, weights: &weights{byID: map[network.RequestID]string{}, byURL: map[string]int64{}}}
	b.cancel = func() { cancel(); acancel() }
	tb.Cleanup(b.cancel)
	// Start the browser now, so a broken install fails here, clearly. The
	// first call on a context allocates the browser, which lives as long as
	// that call's context: it gets the browser's own context, no deadline
	// (a stuck start is cut by the cleanup when the test times out).
	if err := chromedp.Do(ctx, chromedp.Navigate("about:blank")); err != nil {
		tb.Fatalf("start chromium %s: %v", bin, err)
	}
	// A headless tab never has the window's focus, so :focus-visible (the
	// focus ring a keyboard user sees) would never match: emulate it.
	if _, err := chromedp.Call(ctx, emulation.SetFocusEmulationEnabled, emulation.SetFocusEmulationEnabledParams{Enabled: true}); err != nil {
		tb.Fatalf("emulate focus: %v", err)
	}
	if err := chromedp.Listen(ctx, b.weights.listen); err != nil {
		tb.Fatalf("listen to chromium's network events: %v", err)
	}
	b.Shots = os.Getenv("BULKD_SCREENSHOTS")
	if b.Shots == "" {
		b.Shots = tb.TempDir()
	}
	if err := os.MkdirAll(b.Shots, 0o755); err != nil {
		tb.Fatal(err)
	}
	return b
}

// Run runs actions with a deadline, failing the test with what was being
// done when one fails.
func (b *Browser) Run(what string, actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		b.Screenshot("failed-" + slug(what))
		b.t.Fatalf("%s: %v", what, err)
	}
}

// Get runs one action that returns a value, failing the test when it fails.
func Get[T any](b *Browser, what string, a chromedp.Action[T]) T {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		b.Screenshot("failed-" + slug(what))
		b.t.Fatalf("%s: %v", what, err)
	}
	return v
}

// Screenshot saves a full-page PNG as name.png in Shots and returns its
// path.
func (b *Browser) Screenshot(name string) string {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 20*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Logf("screenshot %s: %v", name, err)
		return ""
	}
	p := filepath.Join(b.Shots, name+".png")
	if err := os.WriteFile(p, png, 0o644); err != nil {
		b.t.Fatal(err)
	}
	return p
}

// Text returns the visible text of the first element matching sel.
func (b *Browser) Text(sel string) string {
	b.t.Helper()
	b.Run("wait for "+sel, chromedp.WaitVisible(chromedp.CSS(sel)))
	return strings.TrimSpace(Get(b, "read "+sel, chromedp.Text(chromedp.CSS(sel))))
}

// Location returns the current URL.
func (b *Browser) Location() string {
	b.t.Helper()
	return Get(b, "read the location", chromedp.Location())
}

// Context is the browser's context, for chromedp actions of a test's own.
func (b *Browser) Context() context.Context { return b.ctx }

func slug(s string) string {
	var sb strings.Builder
	for _, r := range strings.ToLower(s) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			sb.WriteRune(r)
		default:
			sb.WriteByte('-')
		}
	}
	return fmt.Sprintf("%.60s", sb.String())
}
