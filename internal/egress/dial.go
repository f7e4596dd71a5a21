package egress

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"time"

	"github.com/bulkd/bulkd/internal/outbound"
)

// ErrFamily is the error of a target whose address family the egress's
// source address cannot reach (an IPv6 MX from an IPv4 source): the caller
// tries the host's next address.
var ErrFamily = errors.New("egress: the source address cannot reach this address family")

// ProxyError is a failure of the proxy itself (unreachable, refused our
// credentials, broke the protocol), as opposed to the proxy reporting that
// the target refused or was unreachable: it says nothing about the mail
// server, so the verifier uses another egress rather than count the server
// down.
type ProxyError struct {
	Egress string
	Proxy  string // host:port, never the credentials
	Err    error
}

func (e *ProxyError) Error() string {
	return fmt.Sprintf("egress %s: socks5 proxy %s: %v", e.Egress, e.Proxy, e.Err)
}

func (e *ProxyError) Unwrap() error { return e.Err }

// IsProxyFailure reports whether err is a failure of an egress's proxy.
func IsProxyFailure(err error) bool {
	var pe *ProxyError
	return errors.As(err, &pe)
}

// Reaches reports whether the egress can dial ip: a direct egress bound to
// a source address reaches only that address's family (a proxy reaches
// what it reaches). The verifier skips the others before taking a slot.
func (e *Egress) Reaches(ip netip.Addr) bool {
	return e.Proxy != nil || !e.Source.IsValid() || e.Source.Is4() == ip.Unmap().Is4()
}

// Dial connects to ip:port through the egress within timeout (and ctx).
//
// The outbound policy applies to the target: ip was checked by the caller
// against pol (the MX is resolved and checked here, never by the proxy),
// and it is checked again here, as the last line: directly by the dialer's
// Control, through a proxy before CONNECT is asked. The proxy is told the
// checked address literal, never a name, so it cannot resolve anything
// else. The proxy's own address is the operator's configuration (often an
// internal one) and is not subject to the policy.
func (e *Egress) Dial(ctx context.Context, ip netip.Addr, port int, timeout time.Duration, pol *outbound.Policy) (net.Conn, error) {
	ip = ip.Unmap()
	target := netip.AddrPortFrom(ip, uint16(port))
	d := net.Dialer{Timeout: timeout}
	if e.Source.IsValid() {
		d.LocalAddr = &net.TCPAddr{IP: e.Source.AsSlice()}
	}
	if e.Proxy == nil {
		if !e.Reaches(ip) {
			return nil, ErrFamily
		}
		d.Control = pol.Control
		return d.DialContext(ctx, "tcp", target.String())
	}
	if !pol.Allowed(ip) {
		return nil, pol.Check("", ip)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	nc, err := d.DialContext(ctx, "tcp", e.Proxy.Host)
	if err != nil {
		return nil, &ProxyError{Egress: e.Name, Proxy: e.ProxyAddr(), Err: fmt.Errorf("connect: %w", err)}
	}
	// The handshake is bounded by the same timeout and ends at once when
	// ctx does.
	dl, _ := ctx.Deadline()
	_ = nc.SetDeadline(dl)
	stop := context.AfterFunc(ctx, func() { _ = nc.SetDeadline(time.Unix(1, 0)) })
	err = e.socksConnect(nc, target)
	stop()
	if err == nil && ctx.Err() != nil {
		// The deadline was moved to the past as the handshake ended.
		err = &ProxyError{Egress: e.Name, Proxy: e.ProxyAddr(), Err: ctx.Err()}
	}
	if err != nil {
		nc.Close()
		return nil, err
	}
	_ = nc.SetDeadline(time.Time{})
	return nc, nil
}

// SOCKS5 (RFC 1928) and its user/password authentication (RFC 1929).
const (
	socksVersion     = 5
	methodNone       = 0x00
	methodUserPass   = 0x02
	methodNoneAccept = 0xff
	cmdConnect       = 0x01
	atypIPv4         = 0x01
	atypDomain       = 0x03
	atypIPv6         = 0x04
)

// socksReplies are the REP field's meanings (RFC 1928 section 6).
var socksReplies = map[byte]string{
	0x01: "general SOCKS server failure",
	0x02: "connection not allowed by ruleset",
	0x03: "network unreachable",
	0x04: "host unreachable",
	0x05: "connection refused",
	0x06: "TTL expired",
	0x07: "command not supported",
	0x08: "address type not supported",
}

// TargetError is the proxy's report that the target could not be reached
// (network or host unreachable, refused, TTL expired): the mail server's
// failure, as a failed direct connect would be.
type TargetError struct {
	Target netip.AddrPort
	Reply  string
}

func (e *TargetError) Error() string {
	return fmt.Sprintf("socks5: connect to %s: %s", e.Target, e.Reply)
}

// socksConnect runs the greeting, the authentication and CONNECT on nc.
func (e *Egress) socksConnect(nc net.Conn, target netip.AddrPort) error {
	if err := e.socksAuth(nc); err != nil {
		return err
	}
	return e.socksRequest(nc, target)
}

// proxyErr is an error of the egress's proxy.
func (e *Egress) proxyErr(format string, a ...any) error {
	return &ProxyError{Egress: e.Name, Proxy: e.ProxyAddr(), Err: fmt.Errorf(format, a...)}
}

// socksAuth runs the greeting and, when the proxy asks for it, the user
// name and password authentication (RFC 1929).
func (e *Egress) socksAuth(nc net.Conn) error {
	perr := e.proxyErr
	user, pass := "", ""
	if e.Proxy.User != nil {
		user = e.Proxy.User.Username()
		pass, _ = e.Proxy.User.Password()
	}
	greet := []byte{socksVersion, 1, methodNone}
	if user != "" {
		greet = []byte{socksVersion, 1, methodUserPass}
	}
	if _, err := nc.Write(greet); err != nil {
		return perr("greeting: %w", err)
	}
	var sel [2]byte
	if _, err := io.ReadFull(nc, sel[:]); err != nil {
		return perr("greeting reply: %w", err)
	}
	if sel[0] != socksVersion {
		return perr("not a SOCKS5 server (version %d)", sel[0])
	}
	switch sel[1] {
	case methodNone:
	case methodUserPass:
		if user == "" {
			return perr("the proxy requires a user name and password")
		}
		// RFC 1929: VER=1, ULEN, UNAME, PLEN, PASSWD.
		msg := make([]byte, 0, 3+len(user)+len(pass))
		msg = append(msg, 1, byte(len(user)))
		msg = append(msg, user...)
		msg = append(msg, byte(len(pass)))
		msg = append(msg, pass...)
		if _, err := nc.Write(msg); err != nil {
			return perr("authentication: %w", err)
		}
		var st [2]byte
		if _, err := io.ReadFull(nc, st[:]); err != nil {
			return perr("authentication reply: %w", err)
		}
		if st[1] != 0 {
			return perr("the proxy refused the user name and password")
		}
	case methodNoneAccept:
		return perr("the proxy accepts none of our authentication methods")
	default:
		return perr("the proxy chose an authentication method we did not offer (%d)", sel[1])
	}
	return nil
}

// socksRequest sends CONNECT to target and reads the reply.
func (e *Egress) socksRequest(nc net.Conn, target netip.AddrPort) error {
	perr := e.proxyErr
	req := []byte{socksVersion, cmdConnect, 0}
	if a := target.Addr(); a.Is4() {
		b := a.As4()
		req = append(req, atypIPv4)
		req = append(req, b[:]...)
	} else {
		b := a.As16()
		req = append(req, atypIPv6)
		req = append(req, b[:]...)
	}
	req = binary.BigEndian.AppendUint16(req, target.Port())
	if _, err := nc.Write(req); err != nil {
		return perr("connect request: %w", err)
	}
	var hdr [4]byte
	if _, err := io.ReadFull(nc, hdr[:]); err != nil {
		return perr("connect reply: %w", err)
	}
	if hdr[0] != socksVersion {
		return perr("connect reply version %d", hdr[0])
	}
	if rep := hdr[1]; rep != 0 {
		msg := socksReplies[rep]
		if msg == "" {
			msg = fmt.Sprintf("reply %d", rep)
		}
		if rep >= 0x03 && rep <= 0x06 {
			return &TargetError{Target: target, Reply: msg}
		}
		return perr("connect to %s: %s", target, msg)
	}
	// BND.ADDR and BND.PORT: read and ignore (what the proxy bound says
	// nothing we need).
	var skip int
	switch hdr[3] {
	case atypIPv4:
		skip = 4
	case atypIPv6:
		skip = 16
	case atypDomain:
		var l [1]byte
		if _, err := io.ReadFull(nc, l[:]); err != nil {
			return perr("connect reply: %w", err)
		}
		skip = int(l[0])
	default:
		return perr("connect reply address type %d", hdr[3])
	}
	if _, err := io.ReadFull(nc, make([]byte, skip+2)); err != nil {
		return perr("connect reply: %w", err)
	}
	return nil
}
