package verify

import (
	"errors"
	"net/netip"
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/net/idna"
)

// Length limits of RFC 5321 4.5.3.1. They are octet counts of the
// normalized (ASCII) form, which is what goes on the wire.
const (
	MaxLocalLen  = 64  // local part, quotes included
	MaxDomainLen = 253 // a DNS name without its trailing dot (255 octets on the wire)
	MaxPathLen   = 254 // local@domain: the 256-octet path minus its angle brackets
	// maxInputLen bounds the work done on a value before it is rejected:
	// nothing longer can normalize to a valid address, whatever the white
	// space or IDNA mapping does (320 is SPEC 2.8's cap; this leaves room).
	maxInputLen = 1024
)

// Address is a syntactically valid, normalized e-mail address.
type Address struct {
	// Local is the local part: lowercase for a dot-atom, exactly as written
	// (quotes and escapes included) for a quoted string.
	Local string
	// Domain is lowercase ASCII: an IDNA A-label name ("xn--bcher-kva.de"), or
	// an address literal in canonical form ("[192.0.2.1]", "[IPv6:2001:db8::1]").
	Domain string
	// Unicode is the domain for display when it has A-labels ("bücher.de"),
	// otherwise equal to Domain.
	Unicode string
	// Quoted reports a quoted-string local part.
	Quoted bool
	// IP is the address of an address literal, invalid otherwise.
	IP netip.Addr
}

// String is the normalized address, the dedupe key of SPEC 2.8/4.4.
func (a Address) String() string { return a.Local + "@" + a.Domain }

// IsIPLiteral reports an address literal domain such as [192.0.2.1].
func (a Address) IsIPLiteral() bool { return a.IP.IsValid() }

// SyntaxError says why a value is not an address. Reason is short and
// stable; it is not shown per result (the result's reason is invalid_syntax)
// but is handy in logs and tests.
type SyntaxError struct{ Reason string }

func (e *SyntaxError) Error() string { return "invalid address: " + e.Reason }

func syntaxErr(r string) error { return &SyntaxError{Reason: r} }

// IsSyntaxError reports whether err came from Normalize.
func IsSyntaxError(err error) bool {
	var se *SyntaxError
	return errors.As(err, &se)
}

// idnaProfile maps a domain for lookup (UTS #46: case folding, width
// mapping, the ideographic full stop) and rejects what cannot be a DNS name.
// VerifyDNSLength catches empty and over-long labels; we still check LDH
// ourselves because Lookup allows underscores and other STD3 violations.
var idnaProfile = idna.New(idna.MapForLookup(), idna.BidiRule(), idna.VerifyDNSLength(true), idna.StrictDomainName(true))

// Normalize parses one address as an SMTP server would accept it in
// RCPT TO (RFC 5321 4.1.2 Mailbox, without the obsolete RFC 5322 forms:
// no comments, no folding white space, no quoted pairs outside quotes) and
// returns it normalized:
//
//   - surrounding white space (and zero-width space/BOM) is trimmed;
//   - a dot-atom local part is lowercased (ASCII only: an EAI local part,
//     RFC 6531, is rejected because almost no MX host accepts one and we
//     cannot prove its mailbox either way);
//   - a quoted local part is kept byte for byte ("John Doe"@x.com and
//     "john doe"@x.com may be different mailboxes, and unquoting would change
//     the dedupe key of a value the client sent deliberately);
//   - the domain is converted to lowercase ASCII with IDNA (UTS #46 lookup
//     mapping), and must be a host name of at least two LDH labels whose
//     top-level label is not numeric;
//   - an address literal is [IPv4] or [IPv6:addr], written back in
//     canonical form; other tags are rejected.
//
// Normalize is idempotent: Normalize(a.String()) returns a again.
func Normalize(s string) (Address, error) { return normalize(s, parseDomain) }

// Normalizer normalizes many addresses, remembering each domain's IDNA
// mapping: a 100,000-address submission usually names a few thousand
// domains, and the mapping was most of Normalize's cost. Not safe for
// concurrent use; use one per submission.
type Normalizer struct {
	domains map[string]parsedDomain
}

type parsedDomain struct {
	ascii, uni string
	err        error
}

// maxNormalizerDomains bounds a Normalizer's memory.
const maxNormalizerDomains = 100_000

// Normalize is the package Normalize, with the domain mapping remembered.
func (n *Normalizer) Normalize(s string) (Address, error) {
	if n.domains == nil {
		n.domains = map[string]parsedDomain{}
	}
	return normalize(s, func(d string) (string, string, error) {
		if p, ok := n.domains[d]; ok {
			return p.ascii, p.uni, p.err
		}
		ascii, uni, err := parseDomain(d)
		if len(n.domains) < maxNormalizerDomains {
			n.domains[d] = parsedDomain{ascii, uni, err}
		}
		return ascii, uni, err
	})
}

func normalize(s string, parseDomain func(string) (string, string, error)) (Address, error) {
	if len(s) > maxInputLen {
		return Address{}, syntaxErr("too long")
	}
	s = strings.TrimFunc(s, isTrimmed)
	if s == "" {
		return Address{}, syntaxErr("empty")
	}
	if !utf8.ValidString(s) {
		return Address{}, syntaxErr("not UTF-8")
	}
	var a Address
	var rest string
	if s[0] == '"' {
		end, err := quotedEnd(s)
		if err != nil {
			return Address{}, err
		}
		a.Local, a.Quoted, rest = s[:end], true, s[end:]
	} else {
		at := strings.IndexByte(s, '@')
		if at < 0 {
			return Address{}, syntaxErr("no @")
		}
		local := s[:at]
		if err := checkDotAtom(local); err != nil {
			return Address{}, err
		}
		a.Local, rest = strings.ToLower(local), s[at:]
	}
	if len(a.Local) > MaxLocalLen {
		return Address{}, syntaxErr("local part over 64 octets")
	}
	if rest == "" || rest[0] != '@' {
		return Address{}, syntaxErr("no @ after the local part")
	}
	domain := rest[1:]
	if domain == "" {
		return Address{}, syntaxErr("empty domain")
	}
	var err error
	if domain[0] == '[' {
		a.Domain, a.IP, err = parseLiteral(domain)
		a.Unicode = a.Domain
	} else {
		a.Domain, a.Unicode, err = parseDomain(domain)
	}
	if err != nil {
		return Address{}, err
	}
	if len(a.Local)+1+len(a.Domain) > MaxPathLen {
		return Address{}, syntaxErr("address over 254 octets")
	}
	return a, nil
}

func isTrimmed(r rune) bool {
	return unicode.IsSpace(r) || r == '\u200b' || r == '\ufeff'
}

// isAtext reports RFC 5322 atext (ASCII).
func isAtext(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return strings.IndexByte("!#$%&'*+-/=?^_`{|}~", c) >= 0
}

func checkDotAtom(s string) error {
	if s == "" {
		return syntaxErr("empty local part")
	}
	if s[0] == '.' || s[len(s)-1] == '.' {
		return syntaxErr("local part starts or ends with a dot")
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '.' {
			if s[i+1] == '.' {
				return syntaxErr("consecutive dots in the local part")
			}
			continue
		}
		if !isAtext(c) {
			if c >= utf8.RuneSelf {
				return syntaxErr("non-ASCII local part")
			}
			return syntaxErr("invalid character in the local part")
		}
	}
	return nil
}

// quotedEnd returns the index just past the closing quote of the quoted
// string that starts s. qtext is printable ASCII except '"' and '\';
// a quoted pair is '\' followed by printable ASCII or space (RFC 5321
// 4.1.2). Control characters are rejected even escaped.
func quotedEnd(s string) (int, error) {
	for i := 1; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"':
			if i == 1 {
				// "" is a valid quoted string in RFC 5321, but an empty
				// mailbox name is never a real one and servers reject it.
				return 0, syntaxErr("empty quoted local part")
			}
			return i + 1, nil
		case c == '\\':
			if i+1 >= len(s) || s[i+1] < ' ' || s[i+1] > '~' {
				return 0, syntaxErr("invalid quoted pair")
			}
			i++
		case c < ' ' || c > '~':
			return 0, syntaxErr("invalid character in the quoted local part")
		}
	}
	return 0, syntaxErr("unterminated quoted local part")
}

// parseLiteral parses an address literal: [IPv4] or [IPv6:addr].
func parseLiteral(d string) (string, netip.Addr, error) {
	if len(d) < 3 || d[len(d)-1] != ']' {
		return "", netip.Addr{}, syntaxErr("malformed address literal")
	}
	inner := d[1 : len(d)-1]
	if len(inner) > 5 && strings.EqualFold(inner[:5], "IPv6:") {
		ip, err := netip.ParseAddr(inner[5:])
		if err != nil || !ip.Is6() || ip.Zone() != "" || ip.Is4In6() {
			return "", netip.Addr{}, syntaxErr("invalid IPv6 address literal")
		}
		return "[IPv6:" + ip.String() + "]", ip, nil
	}
	ip, err := netip.ParseAddr(inner)
	if err != nil || !ip.Is4() {
		return "", netip.Addr{}, syntaxErr("invalid address literal")
	}
	return "[" + ip.String() + "]", ip, nil
}

// parseDomain converts a domain to lowercase ASCII and checks it is a host
// name: LDH labels of 1..63 octets, no leading/trailing hyphen, at least two
// labels, an alphabetic-first top-level label, 253 octets at most. A trailing
// dot is rejected: it is not part of RFC 5321's Domain syntax.
func parseDomain(d string) (ascii, uni string, err error) {
	for i := 0; i < len(d); i++ {
		if c := d[i]; c < ' ' || c == 0x7f || c == ' ' || c == '@' || c == '[' || c == ']' || c == '\\' || c == '"' {
			return "", "", syntaxErr("invalid character in the domain")
		}
	}
	ascii, err = idnaProfile.ToASCII(d)
	if err != nil {
		return "", "", syntaxErr("invalid domain")
	}
	// UTS #46 has corner cases where converting an A-label result again
	// changes it; reject those so Normalize stays idempotent (and such a
	// name could not be looked up consistently anyway).
	if again, err := idnaProfile.ToASCII(ascii); err != nil || again != ascii {
		return "", "", syntaxErr("invalid domain")
	}
	if err := checkHostname(ascii); err != nil {
		return "", "", err
	}
	uni, err = idnaProfile.ToUnicode(ascii)
	if err != nil {
		uni = ascii
	}
	return ascii, uni, nil
}

func checkHostname(s string) error {
	if len(s) > MaxDomainLen {
		return syntaxErr("domain over 253 octets")
	}
	labels := strings.Split(s, ".")
	if len(labels) < 2 {
		return syntaxErr("domain has no dot")
	}
	for _, l := range labels {
		if l == "" {
			return syntaxErr("empty domain label")
		}
		if len(l) > 63 {
			return syntaxErr("domain label over 63 octets")
		}
		if l[0] == '-' || l[len(l)-1] == '-' {
			return syntaxErr("domain label starts or ends with a hyphen")
		}
		for i := 0; i < len(l); i++ {
			c := l[i]
			if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-') {
				return syntaxErr("invalid character in the domain")
			}
		}
	}
	if tld := labels[len(labels)-1]; tld[0] < 'a' || tld[0] > 'z' {
		return syntaxErr("top-level label must start with a letter")
	}
	return nil
}
