package serve

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/bulkd/bulkd/internal/config"
	"github.com/bulkd/bulkd/internal/mailworld"
	"github.com/bulkd/bulkd/internal/testredis"
	"github.com/bulkd/bulkd/internal/testsocks"
)

// startZone serves A records (name -> IPv4) and PTR records (IPv4 -> name)
// on a loopback UDP port.
func startZone(t *testing.T, a, ptr map[string]string) string {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(r)
		q := r.Question[0]
		name := strings.TrimSuffix(strings.ToLower(q.Name), ".")
		hdr := dns.RR_Header{Name: q.Name, Rrtype: q.Qtype, Class: dns.ClassINET, Ttl: 60}
		switch {
		case a[name] != "" && q.Qtype == dns.TypeA:
			m.Answer = append(m.Answer, &dns.A{Hdr: hdr, A: net.ParseIP(a[name]).To4()})
		case a[name] != "":
		default:
			m.Rcode = dns.RcodeNameError
			for ip, n := range ptr {
				if rev, _ := dns.ReverseAddr(ip); strings.EqualFold(rev, q.Name) {
					m.Rcode = dns.RcodeSuccess
					if q.Qtype == dns.TypePTR {
						m.Answer = append(m.Answer, &dns.PTR{Hdr: hdr, Ptr: dns.Fqdn(n)})
					}
				}
			}
		}
		_ = w.WriteMsg(m)
	})}
	go func() { _ = srv.ActivateAndServe() }()
	t.Cleanup(func() { _ = srv.Shutdown() })
	return pc.LocalAddr().String()
}

// TestReadyzShowsEgressHeloCheck: `bulkd serve` with two egresses checks
// each HELO name at start against DNS; /readyz stays 200 and shows the
// result per egress (one matching, one whose PTR names another host), and
// the mismatch is logged as a warning.
func TestReadyzShowsEgressHeloCheck(t *testing.T) {
	_, srv := testredis.Client(t)
	dnsAddr := startZone(t,
		map[string]string{"good.egress.test": "198.51.100.1", "bad.egress.test": "198.51.100.2"},
		map[string]string{"198.51.100.1": "good.egress.test", "198.51.100.2": "someone-else.example.net"})
	cfg := config.Default()
	cfg.Listen = "127.0.0.1:0"
	cfg.MetricsListen = "0"
	cfg.RedisURL = srv.URL
	cfg.DNSServer = dnsAddr
	cfg.SMTPEgress = "name=good,source=127.0.0.2,helo=good.egress.test,public_ip=198.51.100.1;" +
		"name=bad,proxy=socks5://user:hunter2@127.0.0.1:1080,helo=bad.egress.test,public_ip=198.51.100.2"
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	done := make(chan error, 1)
	go func() { done <- Run(ctx, cfg, log, io.Discard, ready) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	var addr string
	select {
	case addr = <-ready:
	case err := <-done:
		t.Fatalf("Run: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("not serving after 30 s")
	}
	type check struct{ Egress, Helo, Status, Detail string }
	var body struct {
		Status  string
		Details struct {
			SMTPEgress []check `json:"smtp_egress"`
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		res, err := http.Get("http://" + addr + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != 200 {
			t.Fatalf("/readyz %d: %s", res.StatusCode, b)
		}
		if err := json.Unmarshal(b, &body); err != nil {
			t.Fatalf("/readyz body %s: %v", b, err)
		}
		if strings.Contains(string(b), "hunter2") {
			t.Fatalf("/readyz shows the proxy password: %s", b)
		}
		pending := len(body.Details.SMTPEgress) == 0
		for _, c := range body.Details.SMTPEgress {
			pending = pending || c.Status == "pending"
		}
		if !pending {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the HELO check did not finish: %s", b)
		}
		time.Sleep(50 * time.Millisecond)
	}
	got := map[string]check{}
	for _, c := range body.Details.SMTPEgress {
		got[c.Egress] = c
	}
	if body.Status != "ready" || got["good"].Status != "ok" || got["bad"].Status != "mismatch" ||
		!strings.Contains(got["bad"].Detail, "someone-else.example.net") {
		t.Fatalf("/readyz: %+v", body)
	}
	if l := logs.String(); !strings.Contains(l, "level=WARN msg=\"smtp egress HELO check\" egress=bad") || strings.Contains(l, "hunter2") {
		t.Errorf("want a warning for egress bad and no password in the log:\n%s", l)
	}
}

// TestVerifyThroughSMTPProxy: `bulkd serve --smtp-proxy socks5://user:pass@...`
// answers GET /v1/verify through the proxy: the proxy is asked to CONNECT
// to the MX's checked address, the mail server sees the proxy's address
// and the HELO name of --smtp-helo, and the answer is the mailbox's truth.
func TestVerifyThroughSMTPProxy(t *testing.T) {
	_, srv := testredis.Client(t)
	w, err := mailworld.Start(context.Background(), mailworld.Spec{
		Hosts:   []mailworld.Host{{Name: "mx.egress.test"}},
		Domains: []mailworld.Domain{{Name: "egress.test", MX: []string{"mx.egress.test"}, Users: []string{"ann"}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Close() })
	px := testsocks.Start(t, testsocks.Options{User: "bulkd", Password: "hunter2", Source: netip.MustParseAddr("127.0.0.9")})
	cfg := config.Default()
	cfg.Listen = "127.0.0.1:0"
	cfg.MetricsListen = "0"
	cfg.RedisURL = srv.URL
	cfg.Demo = true
	cfg.DemoKeysFile = filepath.Join(t.TempDir(), "keys.env")
	cfg.DNSServer = w.DNSAddr()
	cfg.SMTPPort = w.SMTPPort()
	cfg.OutboundAllowCIDRs = "127.0.0.0/8" // the world's MX is on loopback
	cfg.SMTPHelo = "out.egress.test"
	cfg.SMTPProxy = "socks5://bulkd:hunter2@" + px.Addr
	var logs syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	done := make(chan error, 1)
	go func() { done <- Run(ctx, cfg, slog.New(slog.NewTextHandler(&logs, nil)), io.Discard, ready) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	var addr string
	select {
	case addr = <-ready:
	case err := <-done:
		t.Fatalf("Run: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("not serving after 30 s")
	}
	key := parseEnvFile(mustRead(t, cfg.DemoKeysFile))["BULKD_PAYG_KEY"]
	req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/v1/verify?email=ann@egress.test", nil)
	req.Header.Set("X-API-Key", key)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	var got struct{ Status, Reason string }
	_ = json.Unmarshal(b, &got)
	if res.StatusCode != 200 || got.Status != "deliverable" {
		t.Fatalf("GET /v1/verify: %d %s", res.StatusCode, b)
	}
	mx := w.HostIP("mx.egress.test")
	cs := px.Connects()
	if len(cs) == 0 || cs[0].Name || !strings.HasPrefix(cs[0].Target, mx+":") {
		t.Errorf("proxy CONNECTs %+v, want the MX's address %s", cs, mx)
	}
	if seen := w.Clients("mx.egress.test"); seen[mailworld.Client{IP: "127.0.0.9", Helo: "out.egress.test"}] == 0 || len(seen) != 1 {
		t.Errorf("the server saw %v, want only the proxy's 127.0.0.9 greeting as out.egress.test", seen)
	}
	if strings.Contains(logs.String(), "hunter2") {
		t.Errorf("the log carries the proxy password")
	}
}
