package mailworld

import (
	"context"
	"strings"
	"testing"
)

// TestHarden: the chosen domains get a drop-after-K host of their own or
// move to the blocking server, the blocked addresses' truth becomes
// unknown/blocked, the same seed makes the same choice, and the world
// starts.
func TestHarden(t *testing.T) {
	mk := func() (Spec, Hostility) {
		return Harden(Bench(BenchOptions{Domains: 100, PerDomain: 5, Seed: 3}), HardenOptions{DropDomains: 6, BlockDomains: 2, Seed: 3})
	}
	spec, hy := mk()
	if len(hy.Drops) != 6 || len(hy.Blocks) != 2 {
		t.Fatalf("drops %d, blocks %d; want 6 and 2", len(hy.Drops), len(hy.Blocks))
	}
	_, hy2 := mk()
	for d := range hy.Drops {
		if _, ok := hy2.Drops[d]; !ok {
			t.Fatalf("the same seed chose other domains (%s)", d)
		}
	}
	hosts := map[string]Host{}
	for _, h := range spec.Hosts {
		hosts[h.Name] = h
	}
	for _, d := range spec.Domains {
		if k, ok := hy.Drops[d.Name]; ok {
			if h := hosts[d.MX[0]]; h.DropAfterRcpts != k+1 || k < 1 || k > 3 {
				t.Errorf("%s: host %s drops after %d, K %d", d.Name, h.Name, h.DropAfterRcpts, k)
			}
		}
		if hy.Blocks[d.Name] && (len(d.MX) != 1 || d.MX[0] != BlockHost) {
			t.Errorf("%s: MX %v, want %s", d.Name, d.MX, BlockHost)
		}
	}
	blocked := 0
	for _, c := range spec.Cases {
		if hy.Blocks[c.Email[strings.LastIndexByte(c.Email, '@')+1:]] {
			blocked++
			if c.Status != Unknown || c.Reason != "blocked" || !c.Knowable {
				t.Errorf("%s: %+v, want unknown/blocked, knowable", c.Email, c)
			}
		}
	}
	if blocked != 10 {
		t.Errorf("%d blocked cases, want 10", blocked)
	}
	w, err := Start(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	_ = w.Close()
}

// TestHardenShared: the shared domains get an MX name of their own that
// resolves to one of the shared servers, which answer for them with their
// truth unchanged and count the sessions of all those names together.
func TestHardenShared(t *testing.T) {
	spec, hy := Harden(Bench(BenchOptions{Domains: 60, PerDomain: 3, Seed: 5}), HardenOptions{SharedDomains: 9, SharedServers: 3, Seed: 5})
	if len(hy.Shared) != 9 {
		t.Fatalf("%d shared domains, want 9", len(hy.Shared))
	}
	w, err := Start(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	ips := map[string]bool{}
	for _, d := range spec.Domains {
		srv, ok := hy.Shared[d.Name]
		if !ok {
			continue
		}
		if !strings.HasSuffix(d.MX[0], ".mail.protection."+SharedMXSuffix) {
			t.Errorf("%s: MX %v", d.Name, d.MX)
		}
		if got, want := w.HostIP(d.MX[0]), w.HostIP(srv); got == "" || got != want {
			t.Errorf("%s: MX %s resolves to %q, want %s's %q", d.Name, d.MX[0], got, srv, want)
		}
		ips[w.HostIP(d.MX[0])] = true
	}
	if len(ips) != 3 {
		t.Errorf("the shared names lead to %d addresses, want 3", len(ips))
	}
}
