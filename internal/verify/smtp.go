package verify

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// A small SMTP client of our own rather than github.com/emersion/go-smtp's:
// that client sends one command and waits for its reply, so it cannot
// pipeline MAIL + RCPT... in one write (RFC 2920), and its timeouts are per
// connection rather than per reply. We only ever need EHLO/HELO, MAIL, RCPT,
// RSET and QUIT, which fit in this file.

// Reply limits: a hostile or broken server must not make us buffer without
// bound. RFC 5321 4.5.3.1.5 caps a reply line at 512 octets; we allow more.
const (
	maxReplyLine  = 4096
	maxReplyLines = 100
)

// reply is one SMTP reply.
type reply struct {
	code int
	// enh is the RFC 3463 enhanced status code (class, subject, detail)
	// when the reply has one whose class matches the reply's first digit.
	enh  [3]int
	text string // the lines' texts joined by a space, enhanced code included
}

func (r reply) hasEnh() bool { return r.enh[0] != 0 }

func (r reply) String() string { return strconv.Itoa(r.code) + " " + r.text }

// Session errors. errTimeout covers a reply that did not come within
// CommandTimeout or the session deadline; errDropped a connection that
// ended or a reply we could not parse.
var (
	errTimeout = errors.New("smtp: timed out waiting for a reply")
	errDropped = errors.New("smtp: connection lost")
)

type smtpConn struct {
	nc         net.Conn
	r          *bufio.Reader
	w          *bufio.Writer
	cmdTimeout time.Duration
	deadline   time.Time // the session's
	pipelining bool
}

func newSMTPConn(nc net.Conn, cmdTimeout time.Duration, deadline time.Time) *smtpConn {
	return &smtpConn{nc: nc, r: bufio.NewReaderSize(nc, 4096), w: bufio.NewWriterSize(nc, 4096),
		cmdTimeout: cmdTimeout, deadline: deadline}
}

func (c *smtpConn) ioDeadline() time.Time { return c.deadlineIn(c.cmdTimeout) }

// deadlineIn is now + wait, or the session's deadline when that is sooner.
func (c *smtpConn) deadlineIn(wait time.Duration) time.Time {
	d := time.Now().Add(wait)
	if !c.deadline.IsZero() && c.deadline.Before(d) {
		return c.deadline
	}
	return d
}

// send writes commands (each without CRLF) in one write.
func (c *smtpConn) send(cmds ...string) error {
	_ = c.nc.SetWriteDeadline(c.ioDeadline())
	for _, cmd := range cmds {
		c.w.WriteString(cmd)
		c.w.WriteString("\r\n")
	}
	if err := c.w.Flush(); err != nil {
		return netErr(err)
	}
	return nil
}

// read reads one (possibly multi-line) reply within CommandTimeout.
func (c *smtpConn) read() (reply, error) { return c.readWithin(c.cmdTimeout) }

// readWithin reads one reply within wait (and the session's deadline): a
// pipelined group's replies may all come only once the server has processed
// the whole group (Postfix does so), so the group's reads wait longer
// (group.read).
func (c *smtpConn) readWithin(wait time.Duration) (reply, error) {
	_ = c.nc.SetReadDeadline(c.deadlineIn(wait))
	var rep reply
	var texts []string
	for n := 0; ; n++ {
		if n >= maxReplyLines {
			return reply{}, fmt.Errorf("%w: reply over %d lines", errDropped, maxReplyLines)
		}
		line, err := c.readLine()
		if err != nil {
			return reply{}, err
		}
		if len(line) < 3 {
			return reply{}, fmt.Errorf("%w: malformed reply %q", errDropped, line)
		}
		code, err := strconv.Atoi(line[:3])
		if err != nil || code < 200 || code > 599 || (rep.code != 0 && code != rep.code) {
			return reply{}, fmt.Errorf("%w: malformed reply %q", errDropped, line)
		}
		rep.code = code
		more := len(line) > 3 && line[3] == '-'
		if len(line) > 3 && line[3] != '-' && line[3] != ' ' {
			return reply{}, fmt.Errorf("%w: malformed reply %q", errDropped, line)
		}
		if len(line) > 4 {
			texts = append(texts, line[4:])
		}
		if !more {
			break
		}
	}
	rep.text = strings.Join(texts, " ")
	rep.enh = parseEnhanced(rep.code, rep.text)
	return rep, nil
}

func (c *smtpConn) readLine() (string, error) {
	var buf []byte
	for {
		chunk, err := c.r.ReadSlice('\n')
		if len(buf)+len(chunk) > maxReplyLine {
			return "", fmt.Errorf("%w: reply line over %d octets", errDropped, maxReplyLine)
		}
		buf = append(buf, chunk...)
		if err == nil {
			break
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		return "", netErr(err)
	}
	return strings.TrimRight(string(buf), "\r\n"), nil
}

// netErr maps an I/O error to errTimeout or errDropped.
func netErr(err error) error {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return fmt.Errorf("%w: %w", errTimeout, err)
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("%w: closed by the server", errDropped)
	}
	return fmt.Errorf("%w: %w", errDropped, err)
}

var enhRe = regexp.MustCompile(`^([245])\.(\d{1,3})\.(\d{1,3})(?:\s|$)`)

func parseEnhanced(code int, text string) [3]int {
	m := enhRe.FindStringSubmatch(text)
	if m == nil || int(m[1][0]-'0') != code/100 {
		return [3]int{}
	}
	s, _ := strconv.Atoi(m[2])
	d, _ := strconv.Atoi(m[3])
	return [3]int{code / 100, s, d}
}

// hello sends EHLO, falling back to HELO when EHLO is refused with a 5xx
// (RFC 5321 4.1.4), and records whether PIPELINING is offered.
func (c *smtpConn) hello(name string) (reply, error) {
	if err := c.send("EHLO " + name); err != nil {
		return reply{}, err
	}
	rep, err := c.read()
	if err != nil {
		return reply{}, err
	}
	if rep.code == 250 {
		for _, kw := range strings.Fields(strings.ToUpper(rep.text)) {
			if kw == "PIPELINING" {
				c.pipelining = true
			}
		}
		return rep, nil
	}
	if rep.code/100 != 5 {
		return rep, nil
	}
	if err := c.send("HELO " + name); err != nil {
		return reply{}, err
	}
	return c.read()
}

// The EHLO reply's keywords are the first word of each line; joining the
// lines with spaces above loses the line structure, but PIPELINING is a
// keyword without parameters, so matching any word is enough (a domain
// name in the first line cannot be the bare word PIPELINING).

// rcptClass is the meaning of a RCPT TO reply (also used for the MAIL
// reply when it fails).
type rcptClass int

const (
	rcAccepted rcptClass = iota
	rcNotFound
	rcDisabled
	rcFull
	rcRejected
	rcGreylisted
	rcTempFail
	rcTooMany     // too many recipients: not a verdict, retry in a new session
	rcRateLimited // 421 without throttling words: the server is closing the session
	rcBlocked     // the reply blames the client (our IP, host or sender), not the address
	rcThrottled   // the server says we send too much or too fast (isThrottle): pause it briefly
)

// String is the class's name in metrics (bulkd_smtp_replies_total), the
// docs and the reply corpus (testdata/replies.tsv).
func (c rcptClass) String() string {
	switch c {
	case rcAccepted:
		return "accepted"
	case rcNotFound, rcDisabled, rcFull:
		return "address"
	case rcRejected:
		return "policy"
	case rcGreylisted:
		return "greylisting"
	case rcTempFail:
		return "temporary"
	case rcTooMany:
		return "recipient_limit"
	case rcRateLimited:
		return "closing"
	case rcBlocked:
		return "block"
	case rcThrottled:
		return "throttling"
	}
	return "unknown"
}

// countReply counts a reply of class c at stage (bulkd_smtp_replies_total).
func countReply(stage string, c rcptClass) { smtpReplies.WithLabelValues(stage, c.String()).Inc() }

var (
	reNotFound = regexp.MustCompile(`(?i)(user|mailbox|recipient|address|account)\s*(unknown|not found|does ?n[o']t exist|not exist|invalid|unavailable|not available)|unknown\s*(user|mailbox|recipient|address)|no such\s*(user|mailbox|recipient|address|account)|invalid\s*(recipient|mailbox|address)|not\s*a\s*valid\s*(mailbox|recipient|user)|does ?n[o']t have an? (\S+\s+)?account|undeliverable address|is\s+no\s+longer\s+(valid|active|in\s+use)`)
	reDisabled = regexp.MustCompile(`(?i)(mailbox|account|user|address)\s*(is\s*|has\s+been\s*)?(disabled|inactive|suspended|deactivated|locked|closed|blocked|frozen)|disabled\s+(recipient|mailbox|account|user)`)
	reFull     = regexp.MustCompile(`(?i)mailbox\s*(is\s*)?full|over\s*quota|quota\s*exceeded|exceeded\s*(storage|quota)|insufficient\s*storage|storage\s*allocation`)
	reGrey     = regexp.MustCompile(`(?i)grey|gray|try\s*(again\s*)?later|temporarily\s*(deferred|rejected)|internal\s+resource\s+(is\s+)?temporarily\s+unavailable`)
	// reTooMany: the recipients one session or message may have, also
	// Exim's default "Rejected for too many bad recipients" (more than 10
	// RCPTs, most refused, in one connection) and Haraka's "Too many
	// recipient attempts": a new session asks the rest.
	reTooMany = regexp.MustCompile(`(?i)too\s*many\s*(bad\s+|invalid\s+|unknown\s+|failed\s+)?(recipients?|rcpts?)\b`)
	// reSystemFull: the server's own storage or resources, not the
	// mailbox's (452 is also RFC 5321's "insufficient system storage").
	reSystemFull = regexp.MustCompile(`(?i)disk\s+space|space\s+shortage|system\s+(storage|resources)|mail\s+system\s+full|no\s+system\s+resources`)
	// reMessageRefused: a 552 about the message (its content or size),
	// not the mailbox's storage.
	reMessageRefused = regexp.MustCompile(`(?i)spam|virus|content|policy|message\s+(size|length)|too\s+large|size\s+limit`)
	// reMailboxRate: the mailbox receives too much mail now (Gmail's
	// "4.2.1/5.2.1 The user you are trying to contact is receiving mail at
	// a rate that prevents additional messages from being delivered"):
	// the mailbox exists and the server is not limiting us; ask later.
	reMailboxRate = regexp.MustCompile(`(?i)receiving\s+mail\s+(at\s+a\s+rate|too\s+quickly)|too\s+much\s+e?-?mail\s+in\s+a\s+short\s+period`)
)

// classify maps a reply to its meaning: RFC 3463 enhanced status code
// first, then the basic code, then the text as a last resort.
func classify(r reply) rcptClass { return classifyAt(r, stageRcpt, clientID{}) }

// classifyAt is classify for a reply at stage to the client c, which tells
// a block of the client (isClientBlock) from a refusal of the recipient.
func classifyAt(r reply, stage blockStage, c clientID) rcptClass {
	if r.code/100 == 2 {
		return rcAccepted
	}
	if isClientBlock(r, stage, c) {
		return rcBlocked
	}
	if isThrottle(r, stage) {
		return rcThrottled
	}
	if r.code == 421 {
		return rcRateLimited
	}
	temp := r.code/100 == 4
	if reMailboxRate.MatchString(r.text) {
		return rcTempFail
	}
	if r.hasEnh() {
		return classifyEnh(r, temp)
	}
	return classifyText(r, temp)
}

// classifyEnh classifies a reply by its RFC 3463 enhanced status code
// (the text only refines a permanent code that names no mailbox).
func classifyEnh(r reply, temp bool) rcptClass {
	subj, det := r.enh[1], r.enh[2]
	switch {
	case subj == 5 && det == 3:
		return rcTooMany
	case subj == 2 && det == 2:
		return rcFull
	case (subj == 3 && det != 4) || (temp && subj == 4):
		// X.3.x is the mail system's status (not accepting messages,
		// full, misconfigured; X.3.4, too big, is the message's), 4.4.x
		// a routing problem for now: nothing about the mailbox,
		// whatever the first digit.
		return rcTempFail
	case temp && subj == 7 && (r.code == 450 || r.code == 451):
		return rcGreylisted
	case temp:
		// A 4.1.1 or 4.2.1 is not a verdict: the server could not
		// decide now (directory down, mailbox being moved).
		if reGrey.MatchString(r.text) && !reFull.MatchString(r.text) {
			return rcGreylisted
		}
		return rcTempFail
	case subj == 1 && (det == 1 || det == 6):
		return rcNotFound
	case subj == 2 && det == 1:
		return rcDisabled
	default:
		// Other permanent enhanced codes (policy, system, routing)
		// refuse the recipient without naming the mailbox as missing;
		// the text may still be more specific.
		switch {
		case reTooMany.MatchString(r.text):
			return rcTooMany
		case reNotFound.MatchString(r.text):
			return rcNotFound
		case reDisabled.MatchString(r.text):
			return rcDisabled
		case reFull.MatchString(r.text):
			return rcFull
		case reSystemFull.MatchString(r.text):
			return rcTempFail
		}
		return rcRejected
	}
}

// classifyText classifies a reply without an enhanced status code: by its
// basic code, then its text.
func classifyText(r reply, temp bool) rcptClass {
	switch r.code {
	case 452:
		switch {
		case reFull.MatchString(r.text):
			return rcFull
		case reSystemFull.MatchString(r.text) && !reTooMany.MatchString(r.text):
			return rcTempFail
		}
		// RFC 5321 4.5.3.1.10: 452 is the reply for too many recipients.
		return rcTooMany
	case 552:
		// RFC 5321's "exceeded storage allocation"; providers also use it
		// for content ("552 Message rejected for spam or virus content"),
		// which is no full mailbox: the text decides below.
		if reTooMany.MatchString(r.text) {
			return rcTooMany
		}
		if !reMessageRefused.MatchString(r.text) {
			return rcFull
		}
	}
	if temp {
		switch {
		case reTooMany.MatchString(r.text):
			return rcTooMany
		case reFull.MatchString(r.text):
			return rcFull
		case reGrey.MatchString(r.text):
			return rcGreylisted
		}
		return rcTempFail
	}
	switch {
	case reTooMany.MatchString(r.text):
		return rcTooMany
	case reSystemFull.MatchString(r.text):
		return rcTempFail
	case reFull.MatchString(r.text):
		return rcFull
	case reDisabled.MatchString(r.text):
		return rcDisabled
	case reNotFound.MatchString(r.text):
		return rcNotFound
	case r.code == 550 && strings.TrimSpace(r.text) == "":
		return rcNotFound
	}
	return rcRejected
}

// Client blocks. A server that refuses the CLIENT answers every address
// alike, so its reply says nothing about the mailbox: reading it as
// "rejected" would report good addresses undeliverable (and charge for
// them). But a block backs the whole host off for every process for 30
// minutes, so a reply to one recipient must not be taken for one lightly:
// a recipient's own policy ("5.7.1 Sender blocked by recipient", a
// mailing list's ban) is a refusal of that address, not of us.
//
// Which replies are blocks depends on the stage (blockStage):
//
//   - Always: an explicit DNS block list (reDNSBL: "blocked using",
//     Spamhaus, Barracuda, SpamCop, SORBS, "listed at/on", RBL, DNSBL;
//     not "listed in", which a directory's "recipient not listed in the
//     directory" says); and any block wording (reBlockList: reputation, banned,
//     PTR/reverse DNS, block list, blocked senders, not authorized to send)
//     or an x.7.x enhanced code when the text names OUR client (namesClient:
//     the source address we dialled from, our HELO name, or Postfix's and
//     the providers' phrases for the connecting client, "client host",
//     "your IP", "sending IP", "the IP you ...").
//   - At connect, HELO and MAIL (not at RCPT): the block wording alone;
//     the server has not seen a recipient yet, so it can only mean us.
//
// A reply whose enhanced code is about the mailbox (x.1.x addressing, x.2.x
// mailbox) is never a block, whatever its text: "550 5.1.1 <a@b>:
// Recipient address rejected: User unknown" names the recipient, not us.
// Greylisting replies may quote the client's address too; they are
// answered as greylisting.
var (
	reDNSBL = regexp.MustCompile(`(?i)blocked\s+using|spamhaus|barracuda|spamcop|\bsorbs\b|dnsbl|\brbl\b|ipcheck\.proofpoint|proofpoint\.com/dnsbl|proofpoint\s+dynamic\s+reputation|mail-abuse\.com|mailspike|` +
		`\blisted\s+(at|on)\b`)
	reBlockList = regexp.MustCompile(`(?i)(block|black|deny|reject)\s*-?\s*list|` +
		`(poor|bad|low|negative|sender|sending|ip)\s+(\w+\s+)?reputation|dynamic\s+reputation|\bbanned\b|` +
		`client\s+host\s+(is\s+)?blocked|\bip\s+(address\s+)?\[?[0-9a-f.:]+\]?\s+(is\s+|has\s+been\s+|was\s+)?(blocked|banned|blacklisted|blocklisted)\b|` +
		`access\s+from\s+ip\s+address\s+\S+\s+blocked|this\s+ip\s+(address\s+)?(has\s+been|is|was)\s+(temporarily\s+)?(blocked|banned|blacklisted|blocklisted)|blocked\s+for\s+spam|host\s+network\s+not\s+allowed|sender\s+address\s+blocked|` +
		`reverse\s+(dns|hostname|lookup|name)|\bptr\b|\brdns\b|` +
		`blocked\s+senders?|envelope\s+blocked|not\s+authori[sz]ed\s+to\s+send|` +
		`unsolicited\s+mail\s+originating\s+from\s+your\s+ip|connections\s+(will\s+)?not\s+(be\s+)?accepted\s+from`)
	reClientPhrase = regexp.MustCompile(`(?i)client\s+host|your\s+ip|sending\s+ip|the\s+ip\s+you|ip\s+address\s+sending|helo\s+command\s+rejected`)
	// reIPTag is Gmail's tag at the start of its replies, "5.7.1
	// [203.0.113.9      12] ...": it is in every reply, whatever it is
	// about (a message with two From: headers too), so it does not count
	// as naming the client; the words after it still can.
	reIPTag = regexp.MustCompile(`^([245]\.\d{1,3}\.\d{1,3}\s+)?\[[0-9a-fA-F.:]+(\s+\d+)?\]`)
	reIPv4  = regexp.MustCompile(`\b\d{1,3}(\.\d{1,3}){3}\b`)
)

// blockStage is the SMTP stage a reply answers.
type blockStage int

const (
	stageConnect blockStage = iota + 1 // banner, EHLO/HELO
	stageMail                          // MAIL FROM
	stageRcpt                          // RCPT TO (the catch-all probe too)
)

// clientID is how a server may name us: the source address the session
// dialled from and our HELO name.
type clientID struct {
	ip   string // textual, "" unknown
	helo string // lower case, "" unknown
}

// clientOf returns the identity of the session on nc.
func clientOf(nc net.Conn, helo string) clientID {
	var c clientID
	if ap, err := netip.ParseAddrPort(nc.LocalAddr().String()); err == nil {
		c.ip = ap.Addr().Unmap().String()
	}
	if h := strings.ToLower(strings.Trim(helo, "[]")); strings.Contains(h, ".") || strings.Contains(h, ":") {
		c.helo = h
	}
	return c
}

// namesClient reports whether text names the client: one of the phrases
// for the connecting client, our source address as a whole address, or our
// HELO name. An address that is not ours (a recipient server quoting some
// other IP) does not count.
func namesClient(text string, c clientID) bool {
	if reClientPhrase.MatchString(text) {
		return true
	}
	text = reIPTag.ReplaceAllString(text, "")
	lower := strings.ToLower(text)
	if c.ip != "" {
		if strings.Contains(c.ip, ":") {
			if strings.Contains(lower, strings.ToLower(c.ip)) {
				return true
			}
		} else {
			for _, ip := range reIPv4.FindAllString(text, 8) {
				if ip == c.ip {
					return true
				}
			}
		}
	}
	return c.helo != "" && strings.Contains(lower, c.helo)
}

// isClientBlock reports whether a 4xx/5xx reply at stage blames the client
// c rather than the address (see reDNSBL).
func isClientBlock(r reply, stage blockStage, c clientID) bool {
	if r.code/100 != 4 && r.code/100 != 5 {
		return false
	}
	if r.hasEnh() && (r.enh[1] == 1 || r.enh[1] == 2) {
		return false
	}
	if reDNSBL.MatchString(r.text) {
		return true
	}
	blockWords := reBlockList.MatchString(r.text)
	if !blockWords && isThrottle(r, stage) {
		// "421 4.7.0 mx Error: too many connections from 203.0.113.9":
		// naming the client only to say it sends too much is throttling,
		// which a short pause answers; a block backs the server off for
		// 30 minutes and answers nothing.
		return false
	}
	if blockWords && stage != stageRcpt {
		return true
	}
	if !blockWords && !(r.hasEnh() && r.enh[1] == 7) {
		return false
	}
	return namesClient(r.text, c) && !reGreyWord.MatchString(r.text)
}

var reGreyWord = regexp.MustCompile(`(?i)grey|gray`)

// Throttling: the server says the client sends too much or too fast, or
// that it is busy now. Its answer to an address is no verdict, and the
// client is not refused either: the server wants fewer connections,
// recipients or messages per unit of time. Such a reply pauses the server
// briefly and the addresses are asked again (run.throttled).
//
// reThrottle are the words that say so at any stage: the connection and
// rate limits of Postfix (anvil: "too many connections from", "too many
// recipients from", "too much mail from"), Exim (smtp_accept_max*,
// ratelimit ACLs), Sendmail (conncontrol, ratecontrol), Haraka's limit
// plugin, Exchange ("server busy", "maximum number of concurrent
// connections"), and the providers' "rate limit" texts. "Too many
// recipients" alone is the per-message limit (452/x.5.3: rcTooMany); only
// with a rate ("from <client>", "per hour", "this hour") is it throttling.
//
// reLater ("try again later", "temporarily deferred") is throttling only
// on a 421, which closes the session: on a 4xx to one command it is what
// greylisting says to one address (milter-greylist's "451 4.7.1
// Greylisting in action, please come back later") or a temporary failure
// of the server ("452 Space shortage, please try later"), and a pause of
// the whole server for it would cost every other address.
var (
	reThrottle = regexp.MustCompile(`(?i)too\s+many\s+(concurrent\s+|simultaneous\s+|open\s+|smtp\s+|new\s+|parallel\s+|inbound\s+)*(connections|sessions|connects|tls\s+sessions|smtp\s+sessions)|` +
		`too\s+many\s+(recipients|rcpts?|messages|mails?|e-?mails|msgs)\s+(from|for\s+this\s+(ip|host|client|sender)|(were\s+)?(sent|received|submitted)|in\s+the\s+last|per\s+(hour|minute|second|day|time|connection)|this\s+(hour|minute|day)|in\s+a\s+short)|` +
		`too\s+much\s+(mail|traffic)|too\s+fast|too\s+(frequently|quickly)|rate[\s-]*limit|rate\s+(exceeded|overlimit|too\s+high)|` +
		`\b(sender|sending|connection|message|recipient|rcpt|ip|client|mail)\s+rate\b|overlimit|throttl|` +
		`(server|system|service)\s+(is\s+)?(too\s+)?busy|(connection|concurrency|session)\s+(count\s+)?limit|` +
		`max(imum)?\s+(number\s+of\s+)?(concurrent\s+|simultaneous\s+|smtp\s+)*(connections|sessions)|` +
		`(message|messages|mails?)\s+per\s+(connection|session)|can\s+only\s+send|` +
		`too\s+many\s+(messages|mails?)\s+(in|on|per)\s+(this\s+)?(connection|session)|\b(too|server|system|service|host|currently|i'?m|are|is)\s+(\w+\s+)?busy\b|` +
		`rate\b.{0,40}\bover\s+the\s+limit|` +
		`frequency\s+limit|try\s+again\s+slower|slow\s+down|exceeded\s+the\s+rate|excessive\s+volume|` +
		`too\s+many\s+[\w-]+(\s+[\w-]+)?\s+from\s|trop\s+de\s+connexions`)
	// reThrottleClient is throttling wording that names a rate of the
	// client so plainly that it wins over a mailbox enhanced code:
	// GoDaddy's "550 5.1.1 <a@b> - 203.0.113.9 has sent to too many
	// recipients this hour. IB607" is no verdict on a@b.
	reThrottleClient = regexp.MustCompile(`(?i)has\s+sent\s+(to\s+)?too\s+many|too\s+many\s+(recipients|rcpts?|messages|mails?|connections)\s+(from|this\s+(hour|minute|day)|per\s+(hour|minute|day))`)
	// reMailboxBusy is RFC 5321's 450 "mailbox busy": one mailbox's
	// state, not the server's load.
	reMailboxBusy = regexp.MustCompile(`(?i)mailbox\s+(is\s+)?(temporarily\s+)?busy`)
	reLater       = regexp.MustCompile(`(?i)try\s+(again\s+)?later|come\s+back\s+later|temporarily\s+(deferred|rejected|refused)|retry\s+later`)
)

// isThrottle reports whether a 4xx/5xx reply at stage is throttling (see
// reThrottle). A reply whose enhanced code is about the mailbox (x.1.x,
// x.2.x: "450 4.2.1 The user you are trying to contact is receiving mail
// too quickly") or the per-message recipient limit (x.5.3) is not: it is
// one address's answer. Greylisting texts are greylisting.
func isThrottle(r reply, stage blockStage) bool {
	if r.code/100 != 4 && r.code/100 != 5 {
		return false
	}
	if reGreyWord.MatchString(r.text) || reMailboxRate.MatchString(r.text) || reMailboxBusy.MatchString(r.text) {
		return false
	}
	if reThrottleClient.MatchString(r.text) {
		return true
	}
	if r.code != 421 && r.hasEnh() && (r.enh[1] == 1 || r.enh[1] == 2 || (r.enh[1] == 5 && r.enh[2] == 3)) {
		return false
	}
	if reThrottle.MatchString(r.text) {
		return true
	}
	return reLater.MatchString(r.text) && r.code == 421
}

var reRetryIn = regexp.MustCompile(`(?i)(\d{1,5})\s*(seconds|secs?|s|minutes|mins?|m)\b`)

// retryHint reads "try again in 60 seconds"/"5 minutes" from a reply text.
func retryHint(text string) time.Duration {
	m := reRetryIn.FindStringSubmatch(text)
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(m[1])
	d := time.Duration(n) * time.Second
	if strings.HasPrefix(strings.ToLower(m[2]), "m") {
		d = time.Duration(n) * time.Minute
	}
	if d <= 0 || d > 24*time.Hour {
		return 0
	}
	return d
}
