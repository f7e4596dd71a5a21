package mailworld

import (
	"context"
	"testing"
	"time"
)

// TestHostileSpec: the hostile world starts, has every behaviour its doc
// names, and every case's truth agrees with its expected answer where the
// answer is a verdict.
func TestHostileSpec(t *testing.T) {
	s := Hostile(HostileOptions{Ordinary: 5, PerDomain: 4})
	w, err := Start(context.Background(), s)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	seen := map[string]int{}
	for _, c := range s.Cases {
		b := HostileBehaviour(c.Email)
		seen[b]++
		switch {
		case c.Status == Deliverable && s.Truth(c.Email) != Deliverable,
			c.Status == Undeliverable && s.Truth(c.Email) != Undeliverable:
			t.Errorf("%s: case %s/%s, truth %s", c.Email, c.Status, c.Reason, s.Truth(c.Email))
		}
	}
	for _, b := range []string{"ok", "catch", "grey", "drop", "blocked", "dropshared", "dropgrey", "catchgrey", "bounce", "tarpit",
		"tight", "nopipe", "backup", "implicit", "nullmx", "nx", "nomail", "stuck", "dead", "servfail"} {
		if seen[b] == 0 {
			t.Errorf("no %s- addresses", b)
		}
	}
}

// TestHardenPeople: every behaviour is given to some domain, and the
// truth of the people there follows it.
func TestHardenPeople(t *testing.T) {
	spec, cases := People(PeopleOptions{Domains: 60, PerDomain: 6, Seed: 3, RTT: -1})
	spec, cases, beh := HardenPeople(spec, cases, 10*time.Millisecond)
	got := map[string]bool{}
	for _, b := range beh {
		got[b] = true
	}
	for _, b := range PeopleBehaviours {
		if !got[b] {
			t.Errorf("no domain has %s", b)
		}
	}
	for _, c := range cases {
		switch beh[c.Domain] {
		case "blocked":
			if c.Findable || !c.Blocked {
				t.Errorf("%+v on a blocked domain", c)
			}
		case "bounce":
			if c.Findable || !c.CatchAll {
				t.Errorf("%+v on an accept-then-bounce domain", c)
			}
		case "senderblocked":
			if c.Findable {
				t.Errorf("%+v findable on a sender-blocked domain", c)
			}
		}
	}
	before := len(spec.Domains)
	spec = AddColleagues(spec, cases, 1)
	if len(spec.Domains) != before {
		t.Fatal("AddColleagues changed the domains")
	}
	w, err := Start(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	_ = w.Close()
}
