package verify

import (
	"errors"
	"net"
	"strings"
	"testing"
	"time"
)

func TestClassify(t *testing.T) {
	cases := []struct {
		code int
		text string
		want rcptClass
	}{
		{250, "2.1.5 Ok", rcAccepted},
		{251, "User not local; will forward", rcAccepted},
		{550, "5.1.1 User unknown", rcNotFound},
		{550, "5.1.1 <x@y>: Recipient address rejected: User unknown in virtual mailbox table", rcNotFound},
		{553, "5.1.6 mailbox has moved", rcNotFound},
		{550, "5.2.1 Mailbox disabled", rcDisabled},
		{552, "5.2.2 Mailbox full", rcFull},
		{452, "4.2.2 Over quota", rcFull},
		{452, "4.5.3 Too many recipients", rcTooMany},
		{452, "Too many recipients", rcTooMany},
		{452, "", rcTooMany},
		{552, "5.5.3 Too many recipients", rcTooMany},
		{450, "4.7.1 Greylisted, try again later", rcGreylisted},
		{451, "4.7.1 Please try again later", rcGreylisted},
		{451, "4.3.0 Temporary lookup failure", rcTempFail},
		{450, "4.1.1 Recipient lookup failed, try later", rcGreylisted},
		{450, "Greylisted for 300 seconds", rcGreylisted},
		{451, "Local error in processing", rcTempFail},
		{421, "4.7.0 Too many concurrent connections", rcThrottled},
		{421, "4.3.2 Service shutting down", rcRateLimited},
		{550, "5.7.1 Relaying denied", rcRejected},
		{554, "5.7.1 Service unavailable; client host blocked", rcBlocked},
		{550, "No such user here", rcNotFound},
		{550, "Requested action not taken: mailbox unavailable", rcNotFound},
		{550, "", rcNotFound},
		{550, "Administrative prohibition", rcRejected},
		{550, "Account disabled", rcDisabled},
		{552, "Requested mail action aborted: exceeded storage allocation", rcFull},
		{551, "User not local; please try <forward-path>", rcRejected},
		{550, "5.7.1 Recipient address rejected: user does not exist", rcNotFound},
		{550, "4.1.1 mismatched class", rcRejected}, // an enhanced code of another class is ignored
		// Throttling words, and what is not throttling (RFC 5321's 450
		// "mailbox busy", a mailbox over its size limit).
		{450, "Requested mail action not taken: mailbox busy", rcTempFail},
		{552, "Mailbox size over the limit", rcFull},
		{552, "Message rejected for spam or virus content", rcRejected},
		{451, "Sorry, too busy. Try again later.", rcThrottled},
		{550, "rate for ETRN is over the limit (12.0 > 10)", rcThrottled},
	}
	for _, c := range cases {
		r := reply{code: c.code, text: c.text, enh: parseEnhanced(c.code, c.text)}
		if got := classify(r); got != c.want {
			t.Errorf("classify(%d %s) = %d, want %d", c.code, c.text, got, c.want)
		}
	}
}

// TestClassifyClientBlocks: replies that blame the client are rcBlocked,
// genuine recipient refusals are not. Texts are from the providers' public
// documentation and bounce samples as recalled; "(p)" marks a paraphrase.
// The client is 203.0.113.9 (HELO verify.bulkd.example); replies are at
// the RCPT stage unless the case says otherwise.
func TestClassifyClientBlocks(t *testing.T) {
	us := clientID{ip: "203.0.113.9", helo: "verify.bulkd.example"}
	cases := []struct {
		who   string
		code  int
		text  string
		want  rcptClass
		stage blockStage
	}{
		// Microsoft (Exchange Online / Outlook.com NDR docs).
		{"microsoft", 550, "5.7.606 Access denied, banned sending IP [203.0.113.9]. To request removal from this list please visit https://sender.office.com/ and follow the directions.", rcBlocked, 0},
		{"microsoft", 550, "5.7.1 Service unavailable; Client host [203.0.113.9] blocked using Spamhaus. To request removal from this list see https://www.spamhaus.org/query/ip/203.0.113.9 (AS3130).", rcBlocked, 0},
		{"microsoft", 550, "5.7.1 Unfortunately, messages from [203.0.113.9] weren't sent. Please contact your Internet service provider since part of their network is on our block list (S3150).", rcBlocked, 0},
		{"microsoft", 550, "5.4.1 Recipient address rejected: Access denied. AS(201806281)", rcRejected, 0},
		{"microsoft", 550, "5.1.10 RESOLVER.ADR.RecipientNotFound; Recipient not found by SMTP address lookup", rcNotFound, 0},
		// Google (Gmail SMTP error reference).
		{"google", 550, "5.7.1 [203.0.113.9] The IP you're using to send mail is not authorized to send email directly to our servers. Please use the SMTP relay at your service provider instead. Learn more at https://support.google.com/mail/?p=NotAuthorizedError", rcBlocked, 0},
		{"google", 421, "4.7.0 [203.0.113.9] Our system has detected an unusual rate of unsolicited mail originating from your IP address. To protect our users from spam, mail sent from your IP address has been temporarily rate limited.", rcBlocked, 0},
		{"google", 550, "5.7.25 [203.0.113.9] The IP address sending this message does not have a PTR record setup, or the corresponding forward DNS entry does not point to the sending IP.", rcBlocked, 0},
		{"google", 550, "5.1.1 The email account that you tried to reach does not exist. Please try double-checking the recipient's email address for typos or unnecessary spaces.", rcNotFound, 0},
		{"google", 452, "4.2.2 The email account that you tried to reach is over quota.", rcFull, 0},
		// Yahoo (Sender Hub SMTP error codes).
		{"yahoo", 553, "5.7.1 [BL21] Connections will not be accepted from 203.0.113.9, because the ip is in Spamhaus's list; see https://postmaster.yahooinc.com/error-codes", rcBlocked, 0},
		{"yahoo", 421, "4.7.0 [TSS04] Messages from 203.0.113.9 temporarily deferred due to unexpected volume or user complaints - 4.16.55.1; see https://postmaster.yahooinc.com/error-codes", rcThrottled, 0},
		{"yahoo", 554, "5.7.9 Message not accepted for policy reasons. See https://postmaster.yahooinc.com/error-codes", rcRejected, 0},
		{"yahoo", 550, "5.1.1 Requested action not taken: mailbox unavailable (p)", rcNotFound, 0},
		// Proofpoint (p).
		{"proofpoint", 554, "5.7.1 Service unavailable; Client host [203.0.113.9] blocked using Proofpoint Dynamic Reputation; https://ipcheck.proofpoint.com/?ip=203.0.113.9", rcBlocked, 0},
		// Mimecast (reject codes page). "Blocked Senders" and "envelope
		// blocked" are the recipient side's block of our sender: at MAIL
		// it can only be us (blocked, unknown); at RCPT it is one
		// recipient's policy and backs no host off (rejected).
		{"mimecast", 550, "Rejected by header based Blocked Senders - Block policy for Header From - https://community.mimecast.com/docs/DOC-1369#550", rcBlocked, stageMail},
		{"mimecast", 550, "Rejected by header based Blocked Senders - Block policy for Header From - https://community.mimecast.com/docs/DOC-1369#550", rcRejected, stageRcpt},
		{"mimecast", 554, "IP 203.0.113.9 is on a blocklist (p)", rcBlocked, stageRcpt},
		{"mimecast", 550, "Administrative prohibition - envelope blocked - https://community.mimecast.com/docs/DOC-1369#550", rcBlocked, stageMail},
		{"mimecast", 550, "Administrative prohibition - envelope blocked - https://community.mimecast.com/docs/DOC-1369#550", rcRejected, stageRcpt},
		{"mimecast", 550, "Invalid Recipient - https://community.mimecast.com/docs/DOC-1369#550", rcNotFound, 0},
		// Postfix (postscreen/smtpd defaults).
		{"postfix", 554, "5.7.1 Service unavailable; Client host [203.0.113.9] blocked using zen.spamhaus.org; https://www.spamhaus.org/query/ip/203.0.113.9", rcBlocked, 0},
		{"postfix", 450, "4.7.1 Client host rejected: cannot find your reverse hostname, [203.0.113.9]", rcBlocked, 0},
		{"postfix", 550, "5.1.1 <a@b.test>: Recipient address rejected: User unknown in local recipient table", rcNotFound, 0},
		{"postfix", 554, "5.7.1 <a@b.test>: Relay access denied", rcRejected, 0},
		{"postfix", 450, "4.2.0 <a@b.test>: Recipient address rejected: Greylisted, see http://postgrey.schweikert.ch/help/b.test.html", rcGreylisted, 0},
		// Exim (default ACL texts).
		{"exim", 550, "Administrative prohibition", rcRejected, 0},
		{"exim", 550, "rejected because 203.0.113.9 is in a black list at zen.spamhaus.org", rcBlocked, 0},
		{"exim", 550, "Unrouteable address", rcRejected, 0},
		{"exim", 550, "No Such User Here", rcNotFound, 0},
		// Counter-examples: one recipient's refusal at RCPT, even in
		// policy words, is not a block of us (it would back the whole
		// host off for 30 minutes).
		{"recipient", 550, "5.7.1 Sender blocked by recipient (p)", rcRejected, stageRcpt},
		{"recipient", 550, "Recipient not listed in public directory (p)", rcRejected, stageRcpt},
		{"recipient", 550, "5.7.1 <a@b.test>: Recipient address rejected: Access denied", rcRejected, stageRcpt},
		{"recipient", 550, "5.7.1 You are banned from posting to this list (p)", rcRejected, stageRcpt},
		{"recipient", 550, "5.7.1 Message refused: sender domain has a poor reputation with this recipient (p)", rcRejected, stageRcpt},
		{"recipient", 550, "5.7.1 Recipient address rejected: PTR check of the sender domain failed (p)", rcRejected, stageRcpt},
		{"recipient", 550, "5.7.1 Delivery not authorized, message refused; mail for this user is only accepted from 198.51.100.7 (p)", rcRejected, stageRcpt},
		{"recipient", 554, "5.7.1 <a@b.test>: Recipient is on a block list of this domain (p)", rcRejected, stageRcpt},
		// The same words before any recipient, or naming us, are blocks.
		{"mail stage", 550, "5.7.1 Your sender address is banned (p)", rcBlocked, stageMail},
		{"connect", 554, "5.7.1 Poor reputation, connection refused (p)", rcBlocked, stageConnect},
		{"names helo", 550, "5.7.1 verify.bulkd.example has a poor reputation (p)", rcBlocked, stageRcpt},
		{"names ip", 550, "5.7.1 Access denied for 203.0.113.9 (p)", rcBlocked, stageRcpt},
		{"other ip", 550, "5.7.1 Access denied for 203.0.113.90 (p)", rcRejected, stageRcpt},
	}
	for _, c := range cases {
		r := reply{code: c.code, text: c.text, enh: parseEnhanced(c.code, c.text)}
		if c.stage == 0 {
			c.stage = stageRcpt
		}
		if got := classifyAt(r, c.stage, us); got != c.want {
			t.Errorf("%s (stage %d): classify(%d %s) = %d, want %d", c.who, c.stage, c.code, c.text, got, c.want)
		}
	}
}

func TestRetryHint(t *testing.T) {
	for text, want := range map[string]time.Duration{
		"Greylisted, try again in 60 seconds": time.Minute,
		"greylisted for 5 minutes":            5 * time.Minute,
		"try again later":                     0,
		"4.7.1 300s":                          300 * time.Second,
	} {
		if got := retryHint(text); got != want {
			t.Errorf("retryHint(%q) = %v, want %v", text, got, want)
		}
	}
}

// TestReplyParsing feeds the reply reader multi-line, malformed and
// oversized replies.
func TestReplyParsing(t *testing.T) {
	read := func(raw string) (reply, error) {
		a, b := net.Pipe()
		defer a.Close()
		go func() { _, _ = b.Write([]byte(raw)); b.Close() }()
		return newSMTPConn(a, time.Second, time.Time{}).read()
	}
	r, err := read("250-mx.test Hello\r\n250-PIPELINING\r\n250 8BITMIME\r\n")
	if err != nil || r.code != 250 || !strings.Contains(r.text, "PIPELINING") {
		t.Fatalf("multi-line: %+v %v", r, err)
	}
	r, err = read("550 5.1.1 <a@b> User unknown\n")
	if err != nil || r.code != 550 || r.enh != [3]int{5, 1, 1} {
		t.Fatalf("bare LF: %+v %v", r, err)
	}
	for _, bad := range []string{"hello\r\n", "25\r\n", "250-a\r\n251 b\r\n", "2500 x\r\n", "999 x\r\n", "250x\r\n",
		"250 " + strings.Repeat("a", maxReplyLine) + "\r\n", strings.Repeat("250-x\r\n", maxReplyLines+1), "250 no end"} {
		if _, err := read(bad); !errors.Is(err, errDropped) {
			t.Errorf("read(%.30q): %v, want errDropped", bad, err)
		}
	}
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	start := time.Now()
	if _, err := newSMTPConn(a, 100*time.Millisecond, time.Time{}).read(); !errors.Is(err, errTimeout) {
		t.Fatalf("silent server: %v", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("timeout took %v", d)
	}
}
