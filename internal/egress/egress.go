// Package egress is how the SMTP verifier leaves the host: the ways out
// (egresses) an operator configures, each with the name it greets mail
// servers with (HELO), dialling through them (a chosen source address, or a
// SOCKS5 proxy, RFC 1928/1929), and the start-up check that each HELO name's
// A and PTR records match the address mail servers see.
//
// Mail servers judge the client by its IP address and its HELO name: a
// name whose A record is not the connecting address, or an address whose
// PTR does not name it back, is refused or tarpitted by many of them, and
// block lists and rate limits are counted per client address. So each
// egress carries its own HELO name, and the verifier keys its politeness
// (sessions, back-offs, blocks) by egress and server.
package egress

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"regexp"
	"strconv"
	"strings"
)

// DefaultName is the name of the egress built from --smtp-helo alone (the
// host's own address, no proxy). The verifier's limiter keys of this egress
// are the server alone, as they were before egresses existed, so a
// deployment that configures none keeps its keys.
const DefaultName = "default"

// Egress is one way out for SMTP sessions.
type Egress struct {
	// Name labels the egress in logs, metrics, limiter keys and /readyz.
	Name string
	// Helo is the EHLO/HELO name sent through this egress: a name whose A
	// record is PublicIP and whose PTR points back to it.
	Helo string
	// MailFrom is the MAIL FROM address through this egress; empty: the
	// verifier's (verify@ + its HELO name by default).
	MailFrom string
	// Source is the local address sessions are bound to (net.Dialer
	// LocalAddr); invalid: the system chooses. With a proxy it is the
	// address the connection to the proxy leaves from.
	Source netip.Addr
	// Proxy is a socks5:// URL (user:password optional, RFC 1929); nil:
	// sessions connect directly.
	Proxy *url.URL
	// PublicIP is the address mail servers see from this egress, for the
	// HELO check: Source by default (when it is public), unknown for a proxy
	// or the host's default route unless configured (public_ip=).
	PublicIP netip.Addr
}

// ProxyAddr is the proxy's host:port, without credentials: what may be
// logged.
func (e *Egress) ProxyAddr() string {
	if e.Proxy == nil {
		return ""
	}
	return e.Proxy.Host
}

// String describes the egress for logs: never the proxy's credentials.
func (e *Egress) String() string {
	var b strings.Builder
	b.WriteString(e.Name)
	b.WriteString(" (helo ")
	b.WriteString(e.Helo)
	if e.Source.IsValid() {
		b.WriteString(", source ")
		b.WriteString(e.Source.String())
	}
	if e.Proxy != nil {
		b.WriteString(", proxy socks5://")
		b.WriteString(e.ProxyAddr())
	}
	b.WriteString(")")
	return b.String()
}

var nameRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:-]{0,63}$`)

// Flags are the command line's egress settings (internal/config).
type Flags struct {
	Helo      string // --smtp-helo: the default HELO name
	MailFrom  string // --smtp-mail-from
	Egress    string // --smtp-egress: "name=a,source=IP,helo=NAME;name=b,proxy=URL,helo=NAME,public_ip=IP"
	Proxy     string // --smtp-proxy: socks5://[user:pass@]host:port
	SourceIPs string // --smtp-source-ips: "ip[=helo],ip[=helo]"
}

// maxEgresses bounds the egresses of one process (each costs limiter keys
// per server and a DNS check at start).
const maxEgresses = 64

// Parse builds the egresses from the flags. Without --smtp-egress,
// --smtp-proxy or --smtp-source-ips it is the single default egress (the
// host's route, HELO --smtp-helo). --smtp-egress is the full form and
// excludes the two shorthands; --smtp-proxy and --smtp-source-ips exclude
// each other (a proxy reached from several source addresses is one egress
// to the mail servers: write it with --smtp-egress).
func Parse(f Flags) ([]Egress, error) {
	set := 0
	for _, s := range []string{f.Egress, f.Proxy, f.SourceIPs} {
		if strings.TrimSpace(s) != "" {
			set++
		}
	}
	if set > 1 {
		return nil, errors.New("egress: use one of --smtp-egress, --smtp-proxy and --smtp-source-ips")
	}
	var out []Egress
	switch {
	case strings.TrimSpace(f.Egress) != "":
		for i, spec := range strings.Split(f.Egress, ";") {
			if strings.TrimSpace(spec) == "" {
				continue
			}
			e, err := parseSpec(spec, f, i+1)
			if err != nil {
				return nil, err
			}
			out = append(out, e)
		}
	case strings.TrimSpace(f.Proxy) != "":
		p, err := parseProxy(f.Proxy)
		if err != nil {
			return nil, fmt.Errorf("--smtp-proxy: %w", err)
		}
		out = append(out, Egress{Name: "proxy", Helo: f.Helo, MailFrom: f.MailFrom, Proxy: p})
	case strings.TrimSpace(f.SourceIPs) != "":
		for _, part := range strings.Split(f.SourceIPs, ",") {
			part = strings.TrimSpace(part)
			if part == "" {
				continue
			}
			ipS, helo, ok := strings.Cut(part, "=")
			if !ok || strings.TrimSpace(helo) == "" {
				helo = f.Helo
			}
			ip, err := netip.ParseAddr(strings.TrimSpace(ipS))
			if err != nil {
				return nil, fmt.Errorf("--smtp-source-ips: %q: %w", ipS, err)
			}
			ip = ip.Unmap()
			out = append(out, Egress{Name: ip.String(), Helo: strings.TrimSpace(helo), MailFrom: f.MailFrom,
				Source: ip, PublicIP: publicDefault(ip)})
		}
	default:
		out = append(out, Egress{Name: DefaultName, Helo: f.Helo, MailFrom: f.MailFrom})
	}
	if len(out) == 0 {
		return nil, errors.New("egress: no egress given")
	}
	if len(out) > maxEgresses {
		return nil, fmt.Errorf("egress: %d egresses, at most %d", len(out), maxEgresses)
	}
	seen := map[string]bool{}
	routes := map[string]string{}
	for _, e := range out {
		// Two egresses on one route are one client to the mail servers:
		// they would double the sessions a server sees from that address.
		route := e.Source.String() + " via " + e.ProxyAddr()
		if other, ok := routes[route]; ok {
			return nil, fmt.Errorf("egress: %s and %s leave the same way (same source and proxy): mail servers would see one client with twice the sessions", other, e.Name)
		}
		routes[route] = e.Name
		if !nameRe.MatchString(e.Name) {
			return nil, fmt.Errorf("egress: name %q: letters, digits, '.', '_', ':' and '-', at most 64", e.Name)
		}
		if seen[e.Name] {
			return nil, fmt.Errorf("egress: name %q given twice", e.Name)
		}
		seen[e.Name] = true
		if strings.TrimSpace(e.Helo) == "" {
			return nil, fmt.Errorf("egress %s: no HELO name (helo= or --smtp-helo)", e.Name)
		}
	}
	return out, nil
}

// publicDefault is the PublicIP a source address implies: itself when
// public; a private source is behind a NAT whose address we do not know.
func publicDefault(src netip.Addr) netip.Addr {
	if src.IsPrivate() || src.IsLoopback() || src.IsLinkLocalUnicast() || src.IsUnspecified() {
		return netip.Addr{}
	}
	return src
}

// parseSpec parses one egress of --smtp-egress: comma-separated key=value
// pairs (name, helo, source, proxy, public_ip, mail_from).
func parseSpec(spec string, f Flags, n int) (Egress, error) {
	e := Egress{Name: "e" + strconv.Itoa(n), Helo: f.Helo, MailFrom: f.MailFrom}
	var publicSet bool
	for _, kv := range strings.Split(spec, ",") {
		kv = strings.TrimSpace(kv)
		if kv == "" {
			continue
		}
		k, v, ok := strings.Cut(kv, "=")
		k, v = strings.ToLower(strings.TrimSpace(k)), strings.TrimSpace(v)
		if !ok || v == "" {
			return Egress{}, fmt.Errorf("--smtp-egress #%d: %q is not key=value", n, redactKV(k, kv))
		}
		switch k {
		case "name":
			e.Name = v
		case "helo":
			e.Helo = v
		case "mail_from":
			e.MailFrom = v
		case "source":
			ip, err := netip.ParseAddr(v)
			if err != nil {
				return Egress{}, fmt.Errorf("--smtp-egress #%d: source %q: %w", n, v, err)
			}
			e.Source = ip.Unmap()
		case "public_ip":
			ip, err := netip.ParseAddr(v)
			if err != nil {
				return Egress{}, fmt.Errorf("--smtp-egress #%d: public_ip %q: %w", n, v, err)
			}
			e.PublicIP, publicSet = ip.Unmap(), true
		case "proxy":
			p, err := parseProxy(v)
			if err != nil {
				return Egress{}, fmt.Errorf("--smtp-egress #%d: proxy: %w", n, err)
			}
			e.Proxy = p
		default:
			return Egress{}, fmt.Errorf("--smtp-egress #%d: unknown key %q (name, helo, source, proxy, public_ip, mail_from)", n, k)
		}
	}
	if !publicSet && e.Proxy == nil && e.Source.IsValid() {
		e.PublicIP = publicDefault(e.Source)
	}
	return e, nil
}

// redactKV keeps a proxy URL's credentials out of an error message.
func redactKV(k, kv string) string {
	if k == "proxy" {
		return "proxy=..."
	}
	return kv
}

// parseProxy parses a socks5:// URL. Errors never quote the URL: it may
// carry a password.
func parseProxy(s string) (*url.URL, error) {
	u, err := url.Parse(strings.TrimSpace(s))
	if err != nil {
		return nil, errors.New("not a URL (socks5://[user:password@]host:port; percent-encode ',', ';', '@' and ':' in credentials)")
	}
	switch u.Scheme {
	case "socks5", "socks5h":
		// socks5h asks a proxy to resolve names; we never hand it a name
		// (the MX is resolved and checked here), so both mean the same.
	default:
		return nil, fmt.Errorf("scheme %q: only socks5:// is supported", u.Scheme)
	}
	host, port, err := net.SplitHostPort(u.Host)
	if err != nil || host == "" {
		return nil, fmt.Errorf("proxy address %q: host:port required", u.Host)
	}
	if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
		return nil, fmt.Errorf("proxy port %q: 1..65535 required", port)
	}
	if u.Path != "" && u.Path != "/" || u.RawQuery != "" {
		return nil, errors.New("a proxy URL has no path or query")
	}
	if u.User != nil {
		pw, _ := u.User.Password()
		if len(u.User.Username()) == 0 || len(u.User.Username()) > 255 || len(pw) > 255 {
			return nil, errors.New("proxy user name must be 1..255 bytes and its password at most 255 (RFC 1929)")
		}
	}
	return u, nil
}
