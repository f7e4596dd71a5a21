package redirect

import (
	"context"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/bulkd/bulkd/internal/outbound"
)

// The outbound policy in the redirect checks (docs/security.md): with the
// defaults, a domain whose name leads to an internal address gets no
// request, and a redirect to an address literal is never followed.

// TestInternalDomainGetsNoRequest: domains resolving to loopback (through a
// real DNS server), to the metadata address, or to a public and a loopback
// address get no connection from the checker with the default policy, in
// the whole batch, and each answers as a site that could not be reached:
// no result, an error wrapping outbound.ErrRefused, which the company row
// answers as "no redirect" (enrich.Answerer). moved.example's website, on
// 127.0.0.1, would answer with a redirect to another domain.
func TestInternalDomainGetsNoRequest(t *testing.T) {
	w := startDirect(t)
	c := w.checkerAllowing(t, nil, Options{Timeout: 3 * time.Second})
	doms := []string{"moved.example", "metadata.example", "mixed.example", "www.moved.example"}
	if w.hasIPv6 {
		doms = append(doms, "v6only.example")
	}
	rs, errs := c.CheckAll(context.Background(), doms, 4)
	for i, d := range doms {
		if rs[i] != (Result{}) || !errors.Is(errs[i], outbound.ErrRefused) {
			t.Errorf("%s: %+v, %v; want no result and a refusal", d, rs[i], errs[i])
		}
	}
	if n := w.connsTo(""); n != 0 {
		t.Fatalf("the loopback websites accepted %d connections", n)
	}
	// Refusals are not remembered as answers: an operator who opens the
	// range later sees the site at once.
	if c.cache.len() != 0 || c.dead.len() != 0 {
		t.Fatalf("a refusal was cached (results %d, dead %d)", c.cache.len(), c.dead.len())
	}
	// The same world with loopback allowed: the site is reached.
	if got, err := w.checker(t, Options{}).Check(context.Background(), "moved.example"); err != nil || got != (Result{true, "newhome.example"}) {
		t.Fatalf("with the allowance: %+v, %v", got, err)
	}
	if w.connsTo("127.0.0.1") == 0 {
		t.Fatal("with the allowance the site was not reached")
	}
}

// TestRefusedDomainAnswersAtOnce: a refused domain costs its DNS answer and
// nothing else: no wait for a website that never answers (http, then the
// https fallback, would each wait the 2 s response timeout), so the answer
// time does not tell whether anything listens inside.
func TestRefusedDomainAnswersAtOnce(t *testing.T) {
	w := startDirect(t)
	c := w.checkerAllowing(t, nil, Options{Timeout: 5 * time.Second})
	start := time.Now()
	_, err := c.Check(context.Background(), "hang-site.example")
	el := time.Since(start)
	if !errors.Is(err, outbound.ErrRefused) {
		t.Fatalf("err = %v, want a refusal", err)
	}
	t.Logf("refused domain answered in %v", el)
	if el > 300*time.Millisecond {
		t.Fatalf("a refused domain answered after %v, want at once", el)
	}
	if n := w.connsTo(""); n != 0 {
		t.Fatalf("%d connections", n)
	}
}

// TestHopToAddressLiteralNotFollowed: a site (on 127.0.0.1, allowed here so
// that its answer is read) redirecting to http://127.0.0.2/latest/meta-data/,
// or to the same address written as one number, is not followed, even
// though 127.0.0.2 is inside the allowance: a hop to an address literal
// names no website. The chain ends there: not a redirect.
func TestHopToAddressLiteralNotFollowed(t *testing.T) {
	w := startDirect(t)
	for _, allow := range [][]netip.Prefix{outbound.LoopbackPrefixes, {netip.MustParsePrefix("127.0.0.1/32")}} {
		c := w.checkerAllowing(t, allow, Options{})
		for _, d := range []string{"meta-hop.example", "numeric-hop.example"} {
			got, err := c.Check(context.Background(), d)
			if err != nil || got != (Result{}) {
				t.Fatalf("%s (allow %v): %+v, %v; want no redirect", d, allow, got, err)
			}
		}
	}
	if n := w.count("http://meta-hop.example"); n != 2 {
		t.Fatalf("first hop fetched %d times, want 2", n)
	}
	if n := w.connsTo("127.0.0.2"); n != 0 {
		t.Fatalf("127.0.0.2 accepted %d connections: the literal hop was followed", n)
	}
}
