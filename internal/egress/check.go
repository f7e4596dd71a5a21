package egress

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"
)

// Statuses of an egress's HELO check.
const (
	// CheckOK: the HELO name's A/AAAA records include the egress's public
	// address and that address's PTR names the HELO name back.
	CheckOK = "ok"
	// CheckMismatch: a record is missing or names something else; many
	// mail servers will refuse, tarpit or block this egress.
	CheckMismatch = "mismatch"
	// CheckUnverified: the egress's public address is not known (a proxy,
	// or the host's default route, without public_ip=), so only the HELO
	// name's own records were checked: its addresses' PTRs name it back.
	CheckUnverified = "unverified"
	// CheckError: DNS did not answer; the check says nothing.
	CheckError = "error"
	// CheckPending: the check has not finished yet.
	CheckPending = "pending"
)

// heloCheck is 1 for each egress's current check status, for an alert on
// anything but ok.
var heloCheck = prometheus.NewGaugeVec(prometheus.GaugeOpts{
	Name: "bulkd_smtp_egress_helo_check",
	Help: "The start-up check of each SMTP egress's HELO name against its A and PTR records: 1 for the egress's status (ok, mismatch, unverified, error), 0 for the others (docs/egress.md).",
}, []string{"egress", "status"})

// Collectors are the package's Prometheus collectors, for the registry
// that serves /metrics.
func Collectors() []prometheus.Collector { return []prometheus.Collector{heloCheck} }

// Check is the outcome of one egress's HELO check, as /readyz shows it.
type Check struct {
	Egress   string `json:"egress"`
	Helo     string `json:"helo"`
	PublicIP string `json:"public_ip,omitempty"`
	Status   string `json:"status"`
	Detail   string `json:"detail"`
}

// Checker runs the HELO checks and keeps their results for /readyz.
type Checker struct {
	// DNSServer is host:port; empty: the first nameserver of
	// /etc/resolv.conf.
	DNSServer string
	// Timeout bounds one DNS query, default 2s (a failed query is tried
	// once more).
	Timeout time.Duration

	mu      sync.Mutex
	results []Check
}

// NewChecker returns a checker whose results are pending for egs.
func NewChecker(dnsServer string, timeout time.Duration, egs []Egress) *Checker {
	c := &Checker{DNSServer: dnsServer, Timeout: timeout}
	for _, e := range egs {
		c.results = append(c.results, Check{Egress: e.Name, Helo: e.Helo, PublicIP: addrString(e.PublicIP),
			Status: CheckPending, Detail: "the check has not finished"})
	}
	return c
}

func addrString(a netip.Addr) string {
	if !a.IsValid() {
		return ""
	}
	return a.String()
}

// Results returns a copy of the latest results.
func (c *Checker) Results() []Check {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.results)
}

// Run checks every egress (at most 8 at once), logs each result (warn
// unless ok) and keeps them. It returns when all are done or ctx ends.
func (c *Checker) Run(ctx context.Context, egs []Egress, log *slog.Logger) []Check {
	out := make([]Check, len(egs))
	sem := make(chan struct{}, 8)
	var wg sync.WaitGroup
	for i := range egs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			out[i] = c.check(ctx, &egs[i])
		}()
	}
	wg.Wait()
	c.mu.Lock()
	c.results = slices.Clone(out)
	c.mu.Unlock()
	for _, r := range out {
		for _, st := range []string{CheckOK, CheckMismatch, CheckUnverified, CheckError} {
			v := 0.0
			if r.Status == st {
				v = 1
			}
			heloCheck.WithLabelValues(r.Egress, st).Set(v)
		}
	}
	if log != nil {
		for _, r := range out {
			lvl := slog.LevelWarn
			if r.Status == CheckOK {
				lvl = slog.LevelInfo
			}
			log.Log(ctx, lvl, "smtp egress HELO check", "egress", r.Egress, "helo", r.Helo,
				"public_ip", r.PublicIP, "status", r.Status, "detail", r.Detail)
		}
	}
	return out
}

// check is one egress's check.
func (c *Checker) check(ctx context.Context, e *Egress) Check {
	r := Check{Egress: e.Name, Helo: e.Helo, PublicIP: addrString(e.PublicIP)}
	helo := strings.ToLower(strings.TrimSuffix(e.Helo, "."))
	if strings.HasPrefix(helo, "[") {
		r.Status = CheckMismatch
		r.Detail = "the HELO is an address literal: many mail servers refuse or score it; use a name whose A record is the egress's public address and whose PTR names it"
		return r
	}
	server, err := c.server()
	if err != nil {
		r.Status, r.Detail = CheckError, err.Error()
		return r
	}
	addrs, err := c.lookupAddrs(ctx, server, helo)
	if err != nil {
		r.Status, r.Detail = CheckError, fmt.Sprintf("A/AAAA of %s: %v", helo, err)
		return r
	}
	if len(addrs) == 0 {
		r.Status, r.Detail = CheckMismatch, fmt.Sprintf("%s has no A or AAAA record: mail servers that check the HELO name refuse it", helo)
		return r
	}
	if e.PublicIP.IsValid() {
		if !slices.Contains(addrs, e.PublicIP) {
			r.Status = CheckMismatch
			r.Detail = fmt.Sprintf("%s resolves to %s, not to this egress's public address %s", helo, joinAddrs(addrs), e.PublicIP)
			return r
		}
		names, err := c.lookupPTR(ctx, server, e.PublicIP)
		if err != nil {
			r.Status, r.Detail = CheckError, fmt.Sprintf("PTR of %s: %v", e.PublicIP, err)
			return r
		}
		if !slices.Contains(names, helo) {
			r.Status = CheckMismatch
			r.Detail = ptrMismatch(e.PublicIP, names, helo)
			return r
		}
		r.Status, r.Detail = CheckOK, fmt.Sprintf("%s resolves to %s and its PTR names %s", helo, e.PublicIP, helo)
		return r
	}
	// The public address is unknown: check that the HELO name is
	// forward-confirmed (each of its addresses' PTRs names it).
	for _, a := range addrs {
		names, err := c.lookupPTR(ctx, server, a)
		if err != nil {
			r.Status, r.Detail = CheckError, fmt.Sprintf("PTR of %s: %v", a, err)
			return r
		}
		if !slices.Contains(names, helo) {
			r.Status, r.Detail = CheckMismatch, ptrMismatch(a, names, helo)
			return r
		}
	}
	r.Status = CheckUnverified
	r.Detail = fmt.Sprintf("%s resolves to %s whose PTR names it back, but this egress's public address is not known (set public_ip=) so whether mail servers see that address is not checked", helo, joinAddrs(addrs))
	return r
}

func ptrMismatch(a netip.Addr, names []string, helo string) string {
	if len(names) == 0 {
		return fmt.Sprintf("%s has no PTR record: many mail servers refuse clients without reverse DNS", a)
	}
	return fmt.Sprintf("the PTR of %s is %s, not the HELO name %s", a, strings.Join(names, ", "), helo)
}

func joinAddrs(as []netip.Addr) string {
	s := make([]string, len(as))
	for i, a := range as {
		s[i] = a.String()
	}
	return strings.Join(s, ", ")
}

func (c *Checker) server() (string, error) {
	if c.DNSServer != "" {
		return c.DNSServer, nil
	}
	cc, err := dns.ClientConfigFromFile("/etc/resolv.conf")
	if err != nil || len(cc.Servers) == 0 {
		return "", errors.New("no DNS server configured and none in /etc/resolv.conf")
	}
	return net.JoinHostPort(cc.Servers[0], cc.Port), nil
}

// maxCNAMEs bounds the CNAMEs followed for a HELO name.
const maxCNAMEs = 8

func (c *Checker) lookupAddrs(ctx context.Context, server, name string) ([]netip.Addr, error) {
	var out []netip.Addr
	for _, qt := range []uint16{dns.TypeA, dns.TypeAAAA} {
		target := dns.Fqdn(name)
		for hop := 0; hop <= maxCNAMEs; hop++ {
			rrs, err := c.query(ctx, server, target, qt)
			if err != nil {
				return nil, err
			}
			next := ""
			for _, rr := range rrs {
				switch v := rr.(type) {
				case *dns.A:
					if a, ok := netip.AddrFromSlice(v.A.To4()); ok {
						out = append(out, a)
					}
				case *dns.AAAA:
					if a, ok := netip.AddrFromSlice(v.AAAA); ok {
						out = append(out, a.Unmap())
					}
				case *dns.CNAME:
					next = v.Target
				}
			}
			if next == "" || len(out) > 0 {
				break
			}
			target = next
		}
	}
	return out, nil
}

func (c *Checker) lookupPTR(ctx context.Context, server string, a netip.Addr) ([]string, error) {
	rev, err := dns.ReverseAddr(a.String())
	if err != nil {
		return nil, err
	}
	rrs, err := c.query(ctx, server, rev, dns.TypePTR)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, rr := range rrs {
		if p, ok := rr.(*dns.PTR); ok {
			names = append(names, strings.ToLower(strings.TrimSuffix(p.Ptr, ".")))
		}
	}
	return names, nil
}

// query asks one question, once more on failure; NXDOMAIN and NODATA are
// an empty answer, SERVFAIL and the like an error.
func (c *Checker) query(ctx context.Context, server, name string, qt uint16) ([]dns.RR, error) {
	timeout := c.Timeout
	if timeout <= 0 {
		timeout = 2 * time.Second
	}
	m := new(dns.Msg)
	m.SetQuestion(name, qt)
	m.RecursionDesired = true
	var lastErr error
	for try := 0; try < 2; try++ {
		cl := &dns.Client{Net: "udp", Timeout: timeout}
		qctx, cancel := context.WithTimeout(ctx, timeout)
		resp, _, err := cl.ExchangeContext(qctx, m, server)
		cancel()
		if err == nil && resp.Truncated {
			cl.Net = "tcp"
			qctx, cancel := context.WithTimeout(ctx, timeout)
			resp, _, err = cl.ExchangeContext(qctx, m, server)
			cancel()
		}
		if err != nil {
			lastErr = err
			if ctx.Err() != nil {
				break
			}
			continue
		}
		switch resp.Rcode {
		case dns.RcodeSuccess:
			return resp.Answer, nil
		case dns.RcodeNameError:
			return nil, nil
		}
		lastErr = fmt.Errorf("rcode %s", dns.RcodeToString[resp.Rcode])
	}
	return nil, lastErr
}
