package mailworld

import "testing"

// TestAcceptThenBounce: the host answers 250 to a real mailbox, an unknown
// one and the catch-all probe alike, counts the unknown ones as bounces,
// and Spec.Truth still tells them apart; every Case is risky/catch_all.
func TestAcceptThenBounce(t *testing.T) {
	spec := DropsBlocks(DropsBlocksOptions{Drops: 10, Blocked: 2, Bounce: 20})
	checkCases(t, spec)
	var users []string
	for _, d := range spec.Domains {
		if d.Name == "bounce.test" {
			users = d.Users
		}
	}
	if len(users) == 0 || len(users) == 20 {
		t.Fatalf("bounce.test has %d of 20 mailboxes, want some but not all", len(users))
	}
	n, existing := 0, 0
	for _, c := range spec.Cases {
		if c.Email[len(c.Email)-len("@bounce.test"):] != "@bounce.test" {
			continue
		}
		n++
		if c.Status != Risky || c.Reason != "catch_all" || !c.Knowable {
			t.Errorf("%s: case %s/%s, want risky/catch_all", c.Email, c.Status, c.Reason)
		}
		if spec.Truth(c.Email) == Deliverable {
			existing++
		}
	}
	if n != 20 || existing != len(users) {
		t.Errorf("%d cases, %d deliverable by Truth, want 20 and %d", n, existing, len(users))
	}
	if got := spec.Truth(users[0] + "@Bounce.test"); got != Deliverable {
		t.Errorf("Truth(%s) = %s", users[0], got)
	}
	if got := spec.Truth("nobody-here@bounce.test"); got != Undeliverable {
		t.Errorf("Truth(nobody-here) = %s", got)
	}

	w := start(t, spec)
	s := dial(t, w, "mx.bounce.test")
	s.hello()
	if err := s.PrintfLine("MAIL FROM:<>\r\nRCPT TO:<%s@bounce.test>\r\nRCPT TO:<nobody-here@bounce.test>\r\nRCPT TO:<bulkd-probe-x@bounce.test>", users[0]); err != nil {
		t.Fatal(err)
	}
	s.expect("MAIL", "250 2.1.0")
	for range 3 {
		s.expect("RCPT", "250 2.1.5 Ok")
	}
	s.cmd("RCPT TO:<a@drop-001.test>", "550 5.7.1 Relaying denied") // only its own domains
	if b := w.Stats().PerHost["mx.bounce.test"].Bounces; b != 2 {
		t.Errorf("%d bounces counted, want 2 (the unknown mailbox and the probe)", b)
	}
	w.ResetStats()
	if b := w.Stats().PerHost["mx.bounce.test"].Bounces; b != 0 {
		t.Errorf("%d bounces after ResetStats", b)
	}
}
