package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/miekg/dns"
)

// The domain scenarios of the company family (issue 11): rows given by
// website domain with the redirect checks on and no proxy, so bulkd resolves
// every name itself through --dns-server, as a deployment without an egress
// proxy does. The world is in this process: an authoritative DNS server on
// loopback that answers every query at once, and websites on port 80 of
// loopback addresses.
//
//   - dead-<n>.example: NXDOMAIN (with the zone's SOA), the domain of a
//     company that no longer exists or never had a website;
//   - live-<n>.example: an A record (no AAAA) to one of the websites; one in
//     ten answers 301 to http://www.elsewhere.example/, the rest 200;
//   - www.elsewhere.example: a website answering 200.

// liveAddrs are the loopback addresses the websites listen on (port 80).
// Spreading the sites over several addresses spreads the client's
// connections over several 4-tuples: every live domain is a new connection,
// and 20,000 of them to one address would exhaust the ephemeral ports while
// the closed ones sit in TIME_WAIT.
const liveAddrs = 16

func liveIP(n int) string { return fmt.Sprintf("127.3.0.%d", 1+n%liveAddrs) }

// dnsWorld is the DNS server and the websites.
type dnsWorld struct {
	addr    string // DNS server host:port
	udp     *dns.Server
	tcp     *dns.Server
	webs    []*http.Server
	queries atomic.Int64 // DNS questions answered
	nx      atomic.Int64 // of which NXDOMAIN
	a, aaaa atomic.Int64 // of which for A, AAAA records
	hits    atomic.Int64 // website requests
}

func startDNSWorld() (*dnsWorld, error) {
	w := &dnsWorld{}
	// DNS over UDP and TCP on one port: a free UDP port may be taken for
	// TCP, so try a few.
	var pc net.PacketConn
	var ln net.Listener
	for try := 0; ; try++ {
		var err error
		if pc, err = net.ListenPacket("udp", "127.0.0.1:0"); err != nil {
			return nil, err
		}
		if ln, err = net.Listen("tcp", pc.LocalAddr().String()); err == nil {
			break
		}
		pc.Close()
		if try == 20 {
			return nil, fmt.Errorf("DNS over TCP on the UDP port: %w", err)
		}
	}
	// A resolver's socket buffer is sized for bursts (unbound's
	// so-rcvbuf: 4m is the usual advice); the kernel's default of 208 KiB
	// holds a few hundred questions, and a burst beyond it is dropped
	// while this process waits for a core on the busy machine.
	if err := pc.(*net.UDPConn).SetReadBuffer(4 << 20); err != nil {
		return nil, fmt.Errorf("DNS socket buffer: %w", err)
	}
	w.addr = pc.LocalAddr().String()
	w.udp = &dns.Server{PacketConn: pc, Handler: w}
	w.tcp = &dns.Server{Listener: ln, Handler: w}
	go func() { _ = w.udp.ActivateAndServe() }()
	go func() { _ = w.tcp.ActivateAndServe() }()

	site := http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		w.hits.Add(1)
		host := strings.TrimPrefix(r.Host, "www.")
		if strings.HasPrefix(host, "live-") && strings.HasSuffix(host, "0.example") {
			rw.Header().Set("Location", "http://www.elsewhere.example/")
			rw.WriteHeader(http.StatusMovedPermanently)
			return
		}
		rw.WriteHeader(http.StatusOK)
	})
	for i := 0; i < liveAddrs; i++ {
		addr := net.JoinHostPort(liveIP(i), "80")
		l, err := net.Listen("tcp", addr)
		if err != nil {
			w.close()
			return nil, fmt.Errorf("websites listen on %s (port 80 needs root or CAP_NET_BIND_SERVICE; skip the live rows with --mixed-live 0 --live-rows 0): %w", addr, err)
		}
		s := &http.Server{Handler: site, ReadHeaderTimeout: 5 * time.Second}
		w.webs = append(w.webs, s)
		go func() { _ = s.Serve(l) }()
	}
	return w, nil
}

func (w *dnsWorld) close() {
	_ = w.udp.Shutdown()
	_ = w.tcp.Shutdown()
	for _, s := range w.webs {
		_ = s.Close()
	}
}

func (w *dnsWorld) reset() {
	w.queries.Store(0)
	w.nx.Store(0)
	w.a.Store(0)
	w.aaaa.Store(0)
	w.hits.Store(0)
}

// ServeDNS answers authoritatively for example.
func (w *dnsWorld) ServeDNS(rw dns.ResponseWriter, req *dns.Msg) {
	m := new(dns.Msg)
	if len(req.Question) != 1 {
		m.SetRcode(req, dns.RcodeFormatError)
		_ = rw.WriteMsg(m)
		return
	}
	w.queries.Add(1)
	q := req.Question[0]
	switch q.Qtype {
	case dns.TypeA:
		w.a.Add(1)
	case dns.TypeAAAA:
		w.aaaa.Add(1)
	}
	m.SetReply(req)
	m.Authoritative = true
	name := strings.ToLower(q.Name)
	var ip string
	switch {
	case name == "www.elsewhere.example.":
		ip = liveIP(0)
	case strings.HasPrefix(name, "live-") && strings.HasSuffix(name, ".example."):
		var n int
		if _, err := fmt.Sscanf(name, "live-%d.example.", &n); err != nil {
			break
		}
		ip = liveIP(n)
	}
	soa := &dns.SOA{Hdr: dns.RR_Header{Name: "example.", Rrtype: dns.TypeSOA, Class: dns.ClassINET, Ttl: 300},
		Ns: "ns.example.", Mbox: "hostmaster.example.", Serial: 1, Refresh: 3600, Retry: 600, Expire: 86400, Minttl: 300}
	switch {
	case ip == "":
		w.nx.Add(1)
		m.Rcode = dns.RcodeNameError
		m.Ns = append(m.Ns, soa)
	case q.Qtype == dns.TypeA:
		m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 300},
			A: net.ParseIP(ip).To4()})
	default: // the name exists, without records of this type
		m.Ns = append(m.Ns, soa)
	}
	_ = rw.WriteMsg(m)
}

// domainScenario submits the domains to a fresh bulkd (cold caches) that
// resolves through the world's DNS server without a proxy, waits for the
// job, and checks every row's redirect answer against the world.
func domainScenario(bin, redisURL, key string, workers int, w *dnsWorld, name string, doms []string, extra ...string) error {
	w.reset()
	self0 := selfCPU()
	// The websites are on loopback: the operator's allowance opens it.
	args := append([]string{"--workers", fmt.Sprint(workers), "--redirect-checks=true", "--dns-server", w.addr,
		"--outbound-allow-cidrs", "127.0.0.0/8"}, extra...)
	b, err := startBulkdEnv(bin, redisURL, noProxyEnv(), args...)
	if err != nil {
		return err
	}
	defer b.stop()
	hc := &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64, Proxy: nil}}
	t0 := time.Now()
	id, err := submit(hc, b.base, key, submission(doms, "domain"))
	if err != nil {
		return err
	}
	if err := waitDone(hc, b.base, key, id, 600*time.Second); err != nil {
		return err
	}
	el := time.Since(t0)
	bulkdCPU, selfUsed := b.cpu(), selfCPU()-self0
	dead := 0
	for _, d := range doms {
		if strings.HasPrefix(d, "dead-") {
			dead++
		}
	}
	q, nx := w.queries.Load(), w.nx.Load()
	fmt.Printf("%s: %d domain rows (%d dead, %d live) in %s = %.0f rows/s; DNS: %d questions (%d A, %d AAAA, %d NXDOMAIN) = %.2f per row; %d website requests; CPU: bulkd %s (from its start), loadgen with the DNS world and websites %s; bulkd peak RSS %s\n",
		name, len(doms), dead, len(doms)-dead, el.Round(time.Millisecond), float64(len(doms))/el.Seconds(),
		q, w.a.Load(), w.aaaa.Load(), nx, float64(q)/float64(len(doms)), w.hits.Load(),
		bulkdCPU.Round(10*time.Millisecond), selfUsed.Round(10*time.Millisecond), b.peakRSS())
	return checkDomainResults(hc, b.base, key, id, doms)
}

// checkDomainResults reads every row and compares its redirect answer with
// the world: live-<n>.example with n ending in 0 redirects to
// elsewhere.example, every other row does not.
func checkDomainResults(hc *http.Client, base, key, id string, doms []string) error {
	bad := 0
	for off := 0; off < len(doms); off += 500 {
		req, _ := http.NewRequest(http.MethodGet, fmt.Sprintf("%s/v1/company-enrichment/bulk/%s/results?limit=500&offset=%d", base, id, off), nil)
		req.Header.Set("X-API-Key", key)
		res, err := hc.Do(req)
		if err != nil {
			return err
		}
		var page struct {
			Results []struct {
				Result       string  `json:"result"`
				Input        string  `json:"input"`
				IsRedirect   bool    `json:"is_redirect"`
				RedirectedTo *string `json:"redirected_to"`
			} `json:"results"`
		}
		err = json.NewDecoder(res.Body).Decode(&page)
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if err != nil {
			return fmt.Errorf("results page at %d: %w", off, err)
		}
		for i, r := range page.Results {
			d := doms[off+i]
			want := strings.HasPrefix(d, "live-") && strings.HasSuffix(d, "0.example")
			got := r.IsRedirect && r.RedirectedTo != nil && *r.RedirectedTo == "elsewhere.example"
			if r.Input != d || r.Result != "not_found" || got != want || (!want && (r.IsRedirect || r.RedirectedTo != nil)) {
				if bad < 5 {
					fmt.Printf("  wrong row %d: %+v (want redirect %v)\n", off+i, r, want)
				}
				bad++
			}
		}
	}
	if bad > 0 {
		return fmt.Errorf("%d of %d rows answered wrong", bad, len(doms))
	}
	fmt.Printf("  all %d rows answered as the world says\n", len(doms))
	return nil
}

// cpu is the CPU time (user + system) bulkd has used so far.
func (b *bulkd) cpu() time.Duration {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", b.cmd.Process.Pid))
	if err != nil {
		return 0
	}
	// Fields after the command name, which is in parentheses and may hold
	// spaces: utime and stime are the 12th and 13th of them, in clock ticks
	// (100 per second on Linux).
	rest := string(raw[strings.LastIndexByte(string(raw), ')')+2:])
	f := strings.Fields(rest)
	if len(f) < 13 {
		return 0
	}
	var ut, st int64
	_, _ = fmt.Sscan(f[11], &ut)
	_, _ = fmt.Sscan(f[12], &st)
	return time.Duration(ut+st) * 10 * time.Millisecond
}

// selfCPU is the CPU time this process has used.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// noProxyEnv is this process's environment without proxy variables, so
// bulkd goes direct and resolves names itself.
func noProxyEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch strings.ToUpper(k) {
		case "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY":
			continue
		}
		env = append(env, kv)
	}
	return env
}

func startBulkdEnv(bin, redisURL string, env []string, extra ...string) (*bulkd, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	maddr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	args := append([]string{"serve", "--listen", addr, "--metrics-listen", maddr, "--redis-url", redisURL, "--log-level", "warn", "--rate-limit", "1000000",
		// Load runs submit far more than one account may hold at once.
		"--account-max-active-jobs", "0", "--account-max-stored-bytes", "0"}, extra...)
	return launchBulkd(bin, args, env, "http://"+addr, "http://"+maddr)
}

// domainScenarios runs the dead, mixed and live scenarios; each gets its
// own bulkd and its own names, so every cache starts cold.
func domainScenarios(ctx context.Context, bin, redisURL, key string, workers, deadRows, mixedRows, mixedLive, liveRows int, bulkdFlags []string) error {
	w, err := startDNSWorld()
	if err != nil {
		return err
	}
	defer w.close()
	if deadRows > 0 {
		doms := make([]string, deadRows)
		for i := range doms {
			doms[i] = fmt.Sprintf("dead-%d.example", i)
		}
		if err := domainScenario(bin, redisURL, key, workers, w, "dead domains (NXDOMAIN), redirect checks on, no proxy", doms, bulkdFlags...); err != nil {
			return err
		}
	}
	if mixedRows > 0 {
		// Live rows spread evenly among the dead ones.
		doms := make([]string, mixedRows)
		live := 0
		for i := range doms {
			if mixedLive > 0 && i%max(1, mixedRows/mixedLive) == 0 && live < mixedLive {
				doms[i] = fmt.Sprintf("live-%d.example", 1_000_000+live)
				live++
			} else {
				doms[i] = fmt.Sprintf("dead-%d.example", 1_000_000+i)
			}
		}
		if err := domainScenario(bin, redisURL, key, workers, w, "mixed live and dead domains, redirect checks on, no proxy", doms, bulkdFlags...); err != nil {
			return err
		}
	}
	if liveRows > 0 {
		doms := make([]string, liveRows)
		for i := range doms {
			doms[i] = fmt.Sprintf("live-%d.example", 2_000_000+i)
		}
		if err := domainScenario(bin, redisURL, key, workers, w, "live domains, redirect checks on, no proxy", doms, bulkdFlags...); err != nil {
			return err
		}
	}
	_ = ctx
	return nil
}
