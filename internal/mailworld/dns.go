package mailworld

import (
	"net"
	"strings"

	"github.com/miekg/dns"
)

const ttl = 300

// ServeDNS answers one query authoritatively from the spec (it makes World a
// dns.Handler).
func (w *World) ServeDNS(rw dns.ResponseWriter, req *dns.Msg) {
	m := new(dns.Msg)
	if len(req.Question) != 1 {
		m.SetRcode(req, dns.RcodeFormatError)
		_ = rw.WriteMsg(m)
		return
	}
	m.SetReply(req)
	m.Authoritative = true
	m.RecursionAvailable = false
	q := req.Question[0]
	name := canon(q.Name)
	fqdn := dns.Fqdn(name)
	d := w.domains[name]
	hs := w.names[name] // a host's name or alias: its A records

	if d != nil {
		switch d.DNS {
		case DNSTimeout:
			return // never answer
		case DNSServFail:
			m.Rcode = dns.RcodeServerFailure
			m.Authoritative = false
			w.write(rw, req, m)
			return
		case DNSNXDomain:
			if len(hs) == 0 {
				d = nil
			}
		}
	}
	if d == nil && len(hs) == 0 {
		m.Rcode = dns.RcodeNameError
		m.Ns = append(m.Ns, soa(name))
		w.write(rw, req, m)
		return
	}

	hdr := func(t uint16) dns.RR_Header {
		return dns.RR_Header{Name: fqdn, Rrtype: t, Class: dns.ClassINET, Ttl: ttl}
	}
	want := func(t uint16) bool { return q.Qtype == t || q.Qtype == dns.TypeANY }
	aRR := func(ip string) *dns.A {
		return &dns.A{Hdr: hdr(dns.TypeA), A: net.ParseIP(ip).To4()}
	}
	var aAdded = map[string]bool{}
	if d != nil {
		switch d.DNS {
		case DNSMX:
			if want(dns.TypeMX) {
				for i, mx := range d.MX {
					hn := canon(mx)
					m.Answer = append(m.Answer, &dns.MX{Hdr: hdr(dns.TypeMX), Preference: uint16(10 * (i + 1)), Mx: dns.Fqdn(hn)})
					for _, mh := range w.names[hn] {
						m.Extra = append(m.Extra, &dns.A{
							Hdr: dns.RR_Header{Name: dns.Fqdn(hn), Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: ttl},
							A:   net.ParseIP(mh.ip).To4(),
						})
					}
				}
			}
		case DNSNullMX:
			if want(dns.TypeMX) {
				m.Answer = append(m.Answer, &dns.MX{Hdr: hdr(dns.TypeMX), Preference: 0, Mx: "."})
			}
		case DNSNoMXWithA:
			if want(dns.TypeA) && d.aIP != "" {
				m.Answer = append(m.Answer, aRR(d.aIP))
				aAdded[d.aIP] = true
			}
		case DNSNoMail:
			if want(dns.TypeTXT) {
				m.Answer = append(m.Answer, &dns.TXT{Hdr: hdr(dns.TypeTXT), Txt: []string{"v=spf1 -all"}})
			}
		}
	}
	if want(dns.TypeA) {
		for _, h := range hs {
			if !aAdded[h.ip] {
				aAdded[h.ip] = true
				m.Answer = append(m.Answer, aRR(h.ip))
			}
		}
	}
	if len(m.Answer) == 0 {
		m.Ns = append(m.Ns, soa(name)) // NODATA
	}
	w.write(rw, req, m)
}

func (w *World) write(rw dns.ResponseWriter, req, m *dns.Msg) {
	size := dns.MinMsgSize
	if opt := req.IsEdns0(); opt != nil {
		if s := int(opt.UDPSize()); s > size {
			size = s
		}
		m.SetEdns0(uint16(size), false)
	}
	if _, udp := rw.RemoteAddr().(*net.UDPAddr); udp {
		m.Truncate(size)
	} else {
		m.Truncate(dns.MaxMsgSize)
	}
	_ = rw.WriteMsg(m)
}

// soa is the zone apex record used in the authority section of negative
// answers: the zone is taken to be the name's last label (e.g. "test.").
func soa(name string) dns.RR {
	zone := name
	if i := strings.LastIndexByte(name, '.'); i >= 0 {
		zone = name[i+1:]
	}
	zone = dns.Fqdn(zone)
	return &dns.SOA{
		Hdr:     dns.RR_Header{Name: zone, Rrtype: dns.TypeSOA, Class: dns.ClassINET, Ttl: ttl},
		Ns:      "ns.mailworld." + zone,
		Mbox:    "hostmaster.mailworld." + zone,
		Serial:  1,
		Refresh: 3600,
		Retry:   600,
		Expire:  86400,
		Minttl:  ttl,
	}
}
