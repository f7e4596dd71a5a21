package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/bulkd/bulkd/internal/accounts"
	"github.com/bulkd/bulkd/internal/credits"
	"github.com/bulkd/bulkd/internal/spamcheck"
	"github.com/bulkd/bulkd/internal/testspamd"
)

// spamMain measures POST /v1/content-spam-check end to end: the real bulkd
// binary, a private redis-server and a private spamd (internal/testspamd:
// local tests only) on this machine, checking a typical 20 KB marketing
// email (HTML and text versions of a newsletter):
//
//  1. one client: the latency of a check when nothing waits;
//  2. as many clients as spamd has children, twice over: throughput at
//     saturation;
//  3. eight clients per child: past what bulkd lets wait for spamd (4 per
//     connection), the rest is answered 503 engine_unavailable at once.
//
// During each phase (and before, as a baseline) a probe sends GET
// /v1/credits at a fixed rate: the rest of the API must stay responsive
// while spamd is saturated.
//
//	go run ./hack/loadgen spam --bin bin/bulkd [--children 2] [--duration 15s]
func spamMain(args []string) error {
	fs := flag.NewFlagSet("spam", flag.ExitOnError)
	bin := fs.String("bin", "bin/bulkd", "bulkd binary")
	children := fs.Int("children", runtime.NumCPU(), "spamd --max-children (and bulkd --spamd-max-conns)")
	duration := fs.Duration("duration", 15*time.Second, "measured time of each phase")
	probeRate := fs.Int("probe-rate", 100, "GET /v1/credits per second sent alongside")
	_ = fs.Parse(args)

	srv, rdb, cleanup, err := privateRedis()
	if err != nil {
		return err
	}
	defer cleanup()
	dir, err := os.MkdirTemp("", "bulkd-spamd-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	sd, err := testspamd.StartProcess(dir, *children)
	if err != nil {
		return err
	}
	defer sd.Stop()

	ctx := context.Background()
	st := accounts.NewStore(rdb, nil)
	spamKey, err := paygKey(ctx, st, "spam-load", credits.Whole(100))
	if err != nil {
		return err
	}
	probeKey, err := paygKey(ctx, st, "probe", credits.Whole(100))
	if err != nil {
		return err
	}
	b, err := startBulkd(*bin, srv.URL, "--spamd-addr", sd.Addr, "--spamd-max-conns", strconv.Itoa(*children),
		"--spam-check-allowances", "payg=1000000000")
	if err != nil {
		return err
	}
	defer b.stop()

	req := marketingEmail()
	msg, e := req.Message(time.Now())
	if e != nil {
		return fmt.Errorf("build message: %s", e.Detail)
	}
	body, _ := json.Marshal(req)
	fmt.Printf("spam: %d-byte marketing email (%d-byte request), spamd with %d children (local tests only), %d CPUs\n",
		len(msg), len(body), *children, runtime.NumCPU())
	hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 256}}
	var verdict map[string]any
	if code, raw := spamPost(hc, b.base, spamKey, body); code != 200 {
		return fmt.Errorf("first check: %d %s", code, raw)
	} else if err := json.Unmarshal(raw, &verdict); err != nil {
		return err
	}
	fmt.Printf("  verdict: score %v of %v, is_spam %v, %d rules\n", verdict["score"], verdict["threshold"], verdict["is_spam"], len(verdict["rules"].([]any)))

	probe := func(stop <-chan struct{}) []time.Duration {
		return probeCredits(hc, b.base, probeKey, *probeRate, stop)
	}
	// Baseline: the probe alone.
	stop := make(chan struct{})
	go func() { time.Sleep(*duration / 2); close(stop) }()
	base := probe(stop)
	fmt.Printf("  baseline (no checks): GET /v1/credits p50=%s p99=%s max=%s (%d requests)\n", pct(base, 0.5), pct(base, 0.99), pct(base, 1), len(base))

	for _, ph := range []struct {
		name    string
		clients int
	}{
		{"one client", 1},
		{"saturated", 2 * *children},
		{"overloaded", 8 * *children},
	} {
		stop := make(chan struct{})
		var probeLat []time.Duration
		done := make(chan struct{})
		go func() { probeLat = probe(stop); close(done) }()
		t0 := time.Now()
		res := spamLoad(hc, b.base, spamKey, body, ph.clients, *duration)
		took := time.Since(t0)
		close(stop)
		<-done
		fmt.Printf("  %s (%d clients, %s): %.1f checks/s, 200: %d p50=%s p99=%s; 503: %d p50=%s p99=%s; other: %d\n",
			ph.name, ph.clients, took.Round(time.Second), float64(len(res.ok))/took.Seconds(),
			len(res.ok), pct(res.ok, 0.5), pct(res.ok, 0.99), len(res.unavailable), pct(res.unavailable, 0.5), pct(res.unavailable, 0.99), res.other)
		fmt.Printf("    alongside: GET /v1/credits p50=%s p99=%s max=%s (%d requests)\n", pct(probeLat, 0.5), pct(probeLat, 0.99), pct(probeLat, 1), len(probeLat))
		// Let spamd drain what the phase left queued.
		time.Sleep(2 * time.Second)
	}
	return nil
}

type spamResult struct {
	ok, unavailable []time.Duration
	other           int
}

func spamPost(hc *http.Client, base, key string, body []byte) (int, []byte) {
	req, _ := http.NewRequest(http.MethodPost, base+"/v1/content-spam-check", bytes.NewReader(body))
	req.Header.Set("X-API-Key", key)
	req.Header.Set("Content-Type", "application/json")
	res, err := hc.Do(req)
	if err != nil {
		return 0, []byte(err.Error())
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	return res.StatusCode, raw
}

// spamLoad runs clients closed-loop for d.
func spamLoad(hc *http.Client, base, key string, body []byte, clients int, d time.Duration) spamResult {
	var mu sync.Mutex
	var out spamResult
	var wg sync.WaitGroup
	deadline := time.Now().Add(d)
	for c := 0; c < clients; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				t0 := time.Now()
				code, _ := spamPost(hc, base, key, body)
				el := time.Since(t0)
				mu.Lock()
				switch code {
				case 200:
					out.ok = append(out.ok, el)
				case 503:
					out.unavailable = append(out.unavailable, el)
				default:
					out.other++
				}
				mu.Unlock()
				if code == 503 {
					// A client told the engine is busy backs off a little, as
					// the answer asks.
					time.Sleep(100 * time.Millisecond)
				}
			}
		}()
	}
	wg.Wait()
	return out
}

// probeCredits sends GET /v1/credits at rate per second (paced, each on its
// own goroutine so a slow answer does not delay the next) until stop.
func probeCredits(hc *http.Client, base, key string, rate int, stop <-chan struct{}) []time.Duration {
	var mu sync.Mutex
	var lat []time.Duration
	var wg sync.WaitGroup
	t := time.NewTicker(time.Second / time.Duration(rate))
	defer t.Stop()
	for {
		select {
		case <-stop:
			wg.Wait()
			return lat
		case <-t.C:
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequest(http.MethodGet, base+"/v1/credits", nil)
			req.Header.Set("X-API-Key", key)
			t0 := time.Now()
			res, err := hc.Do(req)
			if err != nil {
				return
			}
			_, _ = io.Copy(io.Discard, res.Body)
			res.Body.Close()
			if res.StatusCode == 200 {
				mu.Lock()
				lat = append(lat, time.Since(t0))
				mu.Unlock()
			}
		}()
	}
}

// marketingEmail is a typical newsletter, about 20 KB built: a subject, a
// sender at the shop's domain, an HTML version (a header, fourteen
// products with image, name, text, price and link, a footer with the
// address and an unsubscribe link) and the same as plain text.
func marketingEmail() spamcheck.Request {
	products := []string{"Merino wool coat", "Leather ankle boots", "Cashmere scarf", "Down jacket", "Wool beanie",
		"Flannel shirt", "Corduroy trousers", "Knitted gloves", "Rain boots", "Fleece pullover", "Thermal socks",
		"Wool blanket", "Quilted vest", "Chunky cardigan"}
	var html, text strings.Builder
	html.WriteString(`<!DOCTYPE html><html><head><meta charset="utf-8"><title>Northwind Outfitters - November</title>` +
		`<style>body{font-family:Helvetica,Arial,sans-serif;color:#222;background:#f4f4f4}.card{background:#fff;margin:16px auto;` +
		`padding:16px;max-width:600px}.price{color:#0a6;font-weight:bold}a.button{background:#0a6;color:#fff;padding:8px 16px;` +
		`text-decoration:none;border-radius:4px}</style></head><body>` +
		`<table role="presentation" width="100%" cellpadding="0" cellspacing="0"><tr><td align="center">` +
		`<img src="https://www.northwind-outfitters.example/img/logo.png" width="180" height="48" alt="Northwind Outfitters">` +
		`<h1>Ready for winter</h1><p>Hello Anna,</p><p>The days are getting shorter and the mornings colder. ` +
		`Our winter collection has arrived in the shops and online, and we picked fourteen favourites for you below. ` +
		`As a member you get free delivery on every order over 50 euros until Sunday, and free returns for 60 days.</p>`)
	text.WriteString("NORTHWIND OUTFITTERS - READY FOR WINTER\n\nHello Anna,\n\nThe days are getting shorter and the mornings colder. " +
		"Our winter collection has arrived in the shops and online, and we picked fourteen favourites for you below. " +
		"As a member you get free delivery on every order over 50 euros until Sunday, and free returns for 60 days.\n\n")
	for i, p := range products {
		slug := strings.ReplaceAll(strings.ToLower(p), " ", "-")
		price := fmt.Sprintf("%d.95", 39+i*20)
		desc := "Made to last from carefully sourced materials, cut for everyday comfort and finished by hand in our partner " +
			"workshop in Portugal. Available in four colours and sizes XS to XXL; see the size guide on the product page " +
			"for measurements, care instructions and what our customers say about the fit."
		fmt.Fprintf(&html, `<div class="card"><a href="https://www.northwind-outfitters.example/p/%s?utm_source=newsletter&amp;utm_medium=email&amp;utm_campaign=nov">`+
			`<img src="https://www.northwind-outfitters.example/img/%s.jpg" width="560" height="320" alt="%s"></a>`+
			`<h2>%s</h2><p>%s</p><p class="price">%s EUR</p>`+
			`<p><a class="button" href="https://www.northwind-outfitters.example/p/%s?utm_source=newsletter&amp;utm_medium=email&amp;utm_campaign=nov">See the %s</a></p></div>`,
			slug, slug, p, p, desc, price, slug, strings.ToLower(p))
		fmt.Fprintf(&text, "%s - %s EUR\n%s\nhttps://www.northwind-outfitters.example/p/%s\n\n", p, price, desc, slug)
	}
	footer := "You receive this email because you signed up for the Northwind Outfitters newsletter. " +
		"Northwind Outfitters GmbH, Hafenstrasse 12, 20457 Hamburg, Germany. Managing director: Jana Beck. Register court Hamburg HRB 123456."
	fmt.Fprintf(&html, `<p style="font-size:12px;color:#666">%s <a href="https://www.northwind-outfitters.example/unsubscribe?u=anna">Unsubscribe</a> `+
		`or <a href="https://www.northwind-outfitters.example/preferences?u=anna">change your preferences</a>.</p></td></tr></table></body></html>`, footer)
	fmt.Fprintf(&text, "%s\nUnsubscribe: https://www.northwind-outfitters.example/unsubscribe?u=anna\n", footer)
	s, from, h, t := "Ready for winter: our fourteen favourites, and free delivery until Sunday",
		"Northwind Outfitters <news@northwind-outfitters.example>", html.String(), text.String()
	return spamcheck.Request{Subject: &s, From: &from, HTML: &h, Text: &t}
}
