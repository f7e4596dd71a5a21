package mailworld

import (
	"bufio"
	"bytes"
	"errors"
	"net"
	"strings"
	"sync/atomic"
	"time"
)

// admitGrace is how long a connection over MaxConns waits for a slot before
// it is refused: long enough for the server to notice that a polite client
// closed its previous connection, far shorter than any real round trip.
const admitGrace = 25 * time.Millisecond

// maxLine is the longest command line accepted (RFC 5321 says 512 octets;
// extensions make real servers allow more).
const maxLine = 4096

type session struct {
	w    *World
	h    *host
	c    net.Conn
	br   *bufio.Reader
	bw   *bufio.Writer
	held bool // holds a MaxConns slot (and a place in live)

	greeted bool
	mail    bool // inside a transaction (MAIL given)
	okRcpts int  // accepted recipients in this transaction
	rcpts   int  // RCPTs of this session, across transactions and RSETs
}

func (w *World) delay(h *host) time.Duration {
	return time.Duration(w.rtt.Load()) + h.Tarpit
}

// slot takes one of limit slots of n (limit 0: unlimited).
func slot(n *atomic.Int64, limit int) bool {
	for {
		cur := n.Load()
		if limit > 0 && cur >= int64(limit) {
			return false
		}
		if n.CompareAndSwap(cur, cur+1) {
			return true
		}
	}
}

// tryAcquire takes a MaxConns slot of the host and, for a host of a
// provider, one of the provider's (ProviderMaxConns).
func (h *host) tryAcquire() bool {
	if !slot(&h.admitted, h.MaxConns) {
		return false
	}
	if p := h.prov; p != nil && !slot(&p.admitted, p.maxConns) {
		h.admitted.Add(-1)
		return false
	}
	return true
}

// raise adds one to live and keeps max the highest value it had.
func raise(live, max *atomic.Int64) {
	n := live.Add(1)
	for {
		m := max.Load()
		if n <= m || max.CompareAndSwap(m, n) {
			return
		}
	}
}

func (h *host) enter() {
	raise(&h.live, &h.maxConcurrent)
	if p := h.prov; p != nil {
		raise(&p.live, &p.maxConcurrent)
	}
}

// leave undoes enter.
func (h *host) leave() {
	h.live.Add(-1)
	if p := h.prov; p != nil {
		p.live.Add(-1)
	}
}

func (w *World) serveSMTP(h *host, c net.Conn) {
	defer w.wg.Done()
	defer w.untrack(c)
	defer c.Close()
	s := &session{w: w, h: h, c: c, br: bufio.NewReaderSize(c, maxLine), bw: bufio.NewWriter(c)}
	defer s.release()

	start := time.Now()
	bannerAt := start.Add(w.delay(h))
	admitted := h.tryAcquire()
	if !admitted {
		giveUp := bannerAt
		if g := start.Add(admitGrace); g.After(giveUp) {
			giveUp = g
		}
		for !admitted && time.Now().Before(giveUp) {
			if !w.sleep(time.Millisecond) {
				return
			}
			admitted = h.tryAcquire()
		}
	}
	h.enter()
	if admitted {
		s.held = true
	} else {
		defer h.leave()
	}
	if !w.sleep(time.Until(bannerAt)) {
		return
	}
	h.sessions.Add(1)
	if p := h.prov; p != nil {
		p.sessions.Add(1)
		if !admitted {
			p.rejected421.Add(1)
		}
	}
	if !admitted {
		h.rejected421.Add(1)
		s.reply("421 4.7.0 Too many concurrent connections")
		s.bw.Flush()
		return
	}
	s.reply("220 " + h.name + " ESMTP mailworld")
	if s.bw.Flush() != nil {
		return
	}
	for {
		newBurst := !s.hasLine()
		_ = c.SetReadDeadline(time.Now().Add(idleTimeout))
		line, err := s.readLine()
		if errors.Is(err, bufio.ErrBufferFull) {
			s.reply("500 5.5.2 Line too long")
			s.release()
			s.bw.Flush()
			return
		}
		if err != nil {
			return // EOF, idle timeout or Close
		}
		if newBurst && !w.sleep(w.delay(h)) {
			return
		}
		if s.handle(line) != actContinue {
			s.bw.Flush() // the replies owed so far (and 221); a dropped RCPT gets none
			return
		}
		if !s.hasLine() {
			if s.bw.Flush() != nil {
				return
			}
		}
	}
}

// release gives back the session's MaxConns slot (before the server's last
// words, so a client that reconnects on reading them finds the slot free).
func (s *session) release() {
	if !s.held {
		return
	}
	s.held = false
	// live first: a new session can only take the slot after admitted
	// drops, so live never counts the old and the new session together.
	s.h.leave()
	s.h.admitted.Add(-1)
	if p := s.h.prov; p != nil {
		p.admitted.Add(-1)
	}
}

// hasLine reports whether a whole command line is already buffered.
func (s *session) hasLine() bool {
	n := s.br.Buffered()
	if n == 0 {
		return false
	}
	b, _ := s.br.Peek(n)
	return bytes.IndexByte(b, '\n') >= 0
}

func (s *session) readLine() (string, error) {
	b, err := s.br.ReadSlice('\n')
	if err != nil {
		return "", err
	}
	return strings.TrimRight(string(b), "\r\n"), nil
}

func (s *session) reply(line string) {
	s.bw.WriteString(line)
	s.bw.WriteString("\r\n")
}

type action int

const (
	actContinue action = iota
	actClose           // reply written, close the connection
	actDrop            // close the connection without a reply
)

func (s *session) handle(line string) action {
	verb, arg, _ := strings.Cut(line, " ")
	verb = strings.ToUpper(verb)
	arg = strings.TrimSpace(arg)
	switch verb {
	case "EHLO":
		s.greeted, s.mail, s.okRcpts = true, false, 0
		s.h.clients.note(s.c, arg)
		s.reply("250-" + s.h.name)
		if !s.h.NoPipelining {
			s.reply("250-PIPELINING")
		}
		s.reply("250-ENHANCEDSTATUSCODES")
		s.reply("250-SIZE 35882577")
		s.reply("250 8BITMIME")
	case "HELO":
		s.greeted, s.mail, s.okRcpts = true, false, 0
		s.h.clients.note(s.c, arg)
		s.reply("250 " + s.h.name)
	case "MAIL":
		switch {
		case !s.greeted:
			s.reply("503 5.5.1 Send HELO/EHLO first")
		case s.mail:
			s.reply("503 5.5.1 Sender already specified")
		case !hasPrefixFold(arg, "FROM:"):
			s.reply("501 5.5.4 Syntax: MAIL FROM:<address>")
		default:
			s.mail, s.okRcpts = true, 0
			s.reply("250 2.1.0 Ok")
		}
	case "RCPT":
		switch {
		case !s.mail:
			s.reply("503 5.5.1 Need MAIL command")
		case !hasPrefixFold(arg, "TO:"):
			s.reply("501 5.5.4 Syntax: RCPT TO:<address>")
		default:
			return s.rcpt(strings.TrimSpace(arg[3:]))
		}
	case "DATA":
		switch {
		case !s.mail:
			s.reply("503 5.5.1 Need MAIL command")
		case s.okRcpts == 0:
			s.reply("503 5.5.1 No valid recipients")
		default:
			return s.data()
		}
	case "RSET":
		s.mail, s.okRcpts = false, 0
		s.reply("250 2.0.0 Ok")
	case "NOOP":
		s.reply("250 2.0.0 Ok")
	case "VRFY":
		s.reply("252 2.5.2 Cannot VRFY user, but will accept message and attempt delivery")
	case "HELP":
		s.reply("214 2.0.0 Commands: EHLO HELO MAIL RCPT DATA RSET NOOP VRFY HELP QUIT")
	case "QUIT":
		s.release()
		s.reply("221 2.0.0 Bye")
		return actClose
	default:
		s.reply("500 5.5.2 Error: command not recognized")
	}
	return actContinue
}

func hasPrefixFold(s, prefix string) bool {
	return len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix)
}

// rcpt answers one RCPT TO; path is what follows "TO:".
func (s *session) rcpt(path string) action {
	addr := path
	if strings.HasPrefix(addr, "<") {
		end := strings.IndexByte(addr, '>')
		if end < 0 {
			s.reply("501 5.1.3 Bad recipient address syntax")
			return actContinue
		}
		addr = addr[1:end]
		if i := strings.IndexByte(addr, ':'); i >= 0 && strings.HasPrefix(addr, "@") {
			addr = addr[i+1:] // obsolete source route
		}
	} else if i := strings.IndexByte(addr, ' '); i >= 0 {
		addr = addr[:i] // parameters follow
	}
	h := s.h
	s.rcpts++
	h.rcpts.Add(1)
	if h.RcptDelay > 0 && !s.w.sleep(h.RcptDelay) {
		return actDrop // the world is closing
	}
	if h.DropAfterRcpts > 0 && s.rcpts >= h.DropAfterRcpts {
		h.drops.Add(1)
		s.release()
		return actDrop
	}
	if ip := clientIP(s.c); h.blocksClient(ip) {
		h.blocks.Add(1)
		s.reply("554 5.7.1 Service unavailable; Client host [" + ip + "] blocked using zen.spamhaus.org; https://www.spamhaus.org/query/ip/" + ip)
		return actContinue
	}
	if h.MaxRcpts > 0 && s.rcpts > h.MaxRcpts {
		h.replies452.Add(1)
		s.reply("452 4.5.3 Too many recipients")
		return actContinue
	}
	at := strings.LastIndexByte(addr, '@')
	if at < 0 {
		if strings.EqualFold(addr, "postmaster") {
			s.okRcpts++
			s.reply("250 2.1.5 Ok")
			return actContinue
		}
		s.reply("501 5.1.3 Bad recipient address syntax")
		return actContinue
	}
	local, dom := strings.ToLower(addr[:at]), canon(addr[at+1:])
	if local == "" || dom == "" {
		s.reply("501 5.1.3 Bad recipient address syntax")
		return actContinue
	}
	d := s.w.domains[dom]
	if d == nil || !h.serves[dom] {
		s.reply("550 5.7.1 Relaying denied")
		return actContinue
	}
	if d.Greylist > 0 && s.w.greylisted(local+"@"+dom, d.Greylist) {
		h.greylisted.Add(1)
		s.reply("450 4.7.1 Greylisted, try again later")
		return actContinue
	}
	if h.AcceptThenBounce {
		// No recipient check at RCPT time: the bounce comes later.
		if !d.users[local] && !d.CatchAll || d.full[local] || d.disabled[local] {
			h.bounces.Add(1)
		}
		s.okRcpts++
		s.reply("250 2.1.5 Ok")
		return actContinue
	}
	switch {
	case d.senderBlocked[local]:
		s.reply("550 5.7.1 <" + local + "@" + dom + ">: Sender blocked by the recipient's block list")
	case d.full[local]:
		s.reply("552 5.2.2 Mailbox full")
	case d.disabled[local]:
		s.reply("550 5.2.1 Mailbox disabled")
	case d.users[local] || d.CatchAll:
		s.okRcpts++
		s.reply("250 2.1.5 Ok")
	default:
		s.reply("550 5.1.1 User unknown")
	}
	return actContinue
}

// greylisted records the first attempt for addr and reports whether it is
// still within the greylisting period.
func (w *World) greylisted(addr string, period time.Duration) bool {
	now := time.Now()
	w.greyMu.Lock()
	defer w.greyMu.Unlock()
	first, ok := w.greySeen[addr]
	if !ok {
		w.greySeen[addr] = now
		return true
	}
	return now.Sub(first) < period
}

// data reads a message up to the lone "." and discards it.
func (s *session) data() action {
	s.reply("354 End data with <CR><LF>.<CR><LF>")
	if s.bw.Flush() != nil {
		return actDrop
	}
	var newBurst bool
	for {
		newBurst = !s.hasLine()
		_ = s.c.SetReadDeadline(time.Now().Add(idleTimeout))
		b, err := s.br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			continue // a long line: keep reading it
		}
		if err != nil {
			return actDrop
		}
		if string(bytes.TrimRight(b, "\r\n")) == "." {
			break
		}
	}
	if newBurst && !s.w.sleep(s.w.delay(s.h)) {
		return actDrop
	}
	s.mail, s.okRcpts = false, 0
	s.reply("250 2.0.0 Ok: message discarded")
	return actContinue
}
