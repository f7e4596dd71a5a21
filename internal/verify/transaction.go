package verify

import (
	"crypto/rand"
	"encoding/base32"
	"fmt"
	"strings"
	"time"
)

var probeEnc = base32.StdEncoding.WithPadding(base32.NoPadding)

func probeLocal() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return "bulkd-probe-" + strings.ToLower(probeEnc.EncodeToString(b[:]))[:12]
}

// transaction reads the replies of one transaction of a group and records
// the answers. A non-nil error means the session broke (its own unanswered
// addresses are already handled); limited means a 421 closed it.
func (r *run) transaction(g *group, h *hostQ, s *sess, t *tx) (limited bool, err error) {
	if stop, limited, err := r.txMail(g, h, s, t); stop {
		return limited, err
	}
	r.mu.Lock()
	verdict := t.j.dom.verdict
	r.mu.Unlock()
	var probeTemp reply
	if t.probe {
		var stop bool
		verdict, probeTemp, stop, limited, err = r.txProbe(g, h, s, t, verdict)
		if stop {
			return limited, err
		}
	}
	return r.txRcpts(g, h, s, t, verdict, probeTemp)
}

// txMail reads the replies to a transaction's RSET (on a reused
// session) and MAIL FROM. stop: the transaction ends here (limited and err
// as for transaction).
func (r *run) txMail(g *group, h *hostQ, s *sess, t *tx) (stop, limited bool, err error) {
	j := t.j
	if g.cmds[t.start] == "RSET" {
		rep, err := g.read()
		if err != nil {
			r.txFailed(h, s, j, err)
			return true, false, err
		}
		if isThrottle(rep, stageMail) {
			r.throttled(h, s.srv, rep, "rset", j)
			return true, true, nil
		}
		if rep.code == 421 {
			r.rateLimited(h, s.srv, j)
			return true, true, nil
		}
		if rep.code != 250 {
			err := fmt.Errorf("%w: RSET answered %v", errDropped, rep)
			r.txFailed(h, s, j, err)
			return true, false, err
		}
	}
	mail, err := g.read()
	if err != nil {
		r.txFailed(h, s, j, err)
		return true, false, err
	}
	if mail.code != 250 {
		mcl := classifyAt(mail, stageMail, s.client)
		countReply("mail", mcl)
		if mcl == rcBlocked {
			r.blocked(h, s.srv, mail, "mail", j)
			return true, true, nil
		}
		if mcl == rcThrottled {
			r.throttled(h, s.srv, mail, "mail", j)
			return true, true, nil
		}
		if mail.code == 421 {
			r.rateLimited(h, s.srv, j)
			return true, true, nil
		}
		reason := ReasonSMTPError // 5xx: the server refuses our sender
		if mail.code/100 == 4 {
			reason = ReasonTemporaryFailure
			if mcl == rcGreylisted {
				reason = ReasonGreylisted
			}
		}
		r.mu.Lock()
		r.finish(j.items, reason, j.host(), mail.code)
		r.setRetry(j.items, mail)
		r.mu.Unlock()
		if err := g.skipTo(t.end); err != nil {
			return true, false, err
		}
		return true, false, nil
	}
	return false, false, nil
}

// txProbe reads the reply to the domain's catch-all probe and records
// the verdict it gives. stop: the transaction ends here.
func (r *run) txProbe(g *group, h *hostQ, s *sess, t *tx, verdict int) (_ int, probeTemp reply, stop, limited bool, err error) {
	j := t.j
	rep, err := g.read()
	if err != nil {
		r.txFailed(h, s, j, err)
		return verdict, probeTemp, true, false, err
	}
	cl := classifyAt(rep, stageRcpt, s.client)
	countReply("rcpt", cl)
	switch {
	case cl == rcBlocked:
		// A blocked probe is no verdict on the domain: nothing is
		// cached, and the transaction's addresses are not asked here.
		r.blocked(h, s.srv, rep, "rcpt", j)
		return verdict, probeTemp, true, true, nil
	case cl == rcThrottled:
		r.throttled(h, s.srv, rep, "rcpt", j)
		return verdict, probeTemp, true, true, nil
	case cl == rcRateLimited:
		r.rateLimited(h, s.srv, j)
		return verdict, probeTemp, true, true, nil
	case cl == rcTooMany:
		r.tooMany(h, s, j, j.items)
		if err := g.skipTo(t.end); err != nil {
			return verdict, probeTemp, true, false, err
		}
		return verdict, probeTemp, true, false, nil
	case rep.code/100 == 2:
		verdict = 1
	case rep.code/100 == 5:
		verdict = 2
	default:
		probeTemp = rep
	}
	s.answered++
	if decisive(cl) {
		s.decided++
	}
	if verdict != 0 {
		r.v.noteVerdict(j.dom.name, verdict == 1)
		r.mu.Lock()
		j.dom.verdict = verdict
		r.mu.Unlock()
	}
	return verdict, probeTemp, false, false, nil
}

// txRcpts reads the replies to the transaction's RCPTs and records the
// answers.
func (r *run) txRcpts(g *group, h *hostQ, s *sess, t *tx, verdict int, probeTemp reply) (limited bool, err error) {
	j := t.j
	var again, grey []*item
	for i, it := range j.items {
		rep, err := g.read()
		if err != nil {
			r.txFailed(h, s, &job{dom: j.dom, items: j.items[i:], mxi: j.mxi}, err)
			return false, err
		}
		cl := classifyAt(rep, stageRcpt, s.client)
		if cl == rcGreylisted && r.deferralIsThrottle(h, s, rep) {
			cl = rcThrottled
		}
		countReply("rcpt", cl)
		if cl == rcBlocked {
			r.blocked(h, s.srv, rep, "rcpt", &job{dom: j.dom, items: j.items[i:], mxi: j.mxi})
			return true, nil
		}
		if cl == rcThrottled {
			// "450 4.7.1 Error: too many recipients from <us>": the rest
			// of the group would get the same; ask them after the pause.
			r.throttledAfter(h, s.srv, rep, "rcpt", &job{dom: j.dom, items: j.items[i:], mxi: j.mxi}, s.decided > 0)
			return true, nil
		}
		if cl == rcRateLimited {
			r.rateLimited(h, s.srv, &job{dom: j.dom, items: j.items[i:], mxi: j.mxi})
			return true, nil
		}
		if cl == rcTooMany {
			again = append(again, it)
			continue
		}
		s.answered++
		r.mu.Lock()
		if decisive(cl) {
			s.decided++
			h.decided++
		}
		if r.answer(it, j.host(), rep, cl, verdict, probeTemp) {
			grey = append(grey, it)
		}
		r.mu.Unlock()
	}
	if len(grey) > 0 {
		r.mu.Lock()
		r.greyRetry(&job{dom: j.dom, items: grey, mxi: j.mxi})
		r.mu.Unlock()
	}
	if len(again) > 0 {
		r.tooMany(h, s, j, again)
	}
	return false, nil
}

// deferralIsThrottle reports whether rep, a RCPT deferral classified as
// greylisting, is the server's rate limit instead (docs/egress.md, "Reply
// classes"): its text has no greylisting word (only "try (again) later",
// a bare 4.7.x) and the server has already decided on other recipients of
// ours: in this session (a greylister defers a new triplet from its first
// RCPT, it does not start deferring in the middle of a session whose
// recipients it accepts and refuses), or in an earlier session of this
// call to the host, or it throttled us lately (and no session started
// since answered cleanly). Exim's default `defer ratelimit` answers "451
// Temporary local problem - please try later" that way; read as
// greylisting, its addresses waited for the retry schedule and a quarter
// of them stayed unknown. Read as throttling, the server is paused briefly
// (growing) and they are asked again within the call. A real greylister
// with a vague text that defers a new recipient after others passed costs
// at most the throttling pauses; its addresses are then rate_limited
// (Temporary), and the retry pass asks them again.
func (r *run) deferralIsThrottle(h *hostQ, s *sess, rep reply) bool {
	if rep.code/100 != 4 || reGreyWord.MatchString(rep.text) {
		return false
	}
	if s.decided > 0 {
		return true
	}
	r.mu.Lock()
	n := h.decided
	r.mu.Unlock()
	if n > 0 {
		return true
	}
	at, ok := r.v.throttled.get(s.srv.key, time.Now())
	return ok && !at.IsZero()
}

// decisive reports whether a RCPT reply of class c decided on the
// address: accepted, or refused as unknown, disabled or full.
func decisive(c rcptClass) bool {
	return c == rcAccepted || c == rcNotFound || c == rcDisabled || c == rcFull
}
