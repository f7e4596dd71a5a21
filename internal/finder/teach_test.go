package finder_test

import (
	"context"
	"testing"
	"time"

	"github.com/bulkd/bulkd/internal/finder"
	"github.com/bulkd/bulkd/internal/mailworld"
	"github.com/bulkd/bulkd/internal/testredis"
	"github.com/bulkd/bulkd/internal/verification"
	"github.com/bulkd/bulkd/internal/verify"
)

// teachWorld: two companies whose pattern is not the top prior ({f}.{last}
// and {first}_{last}), a catch-all company and a free provider.
func teachWorld() mailworld.Spec {
	return mailworld.Spec{
		Hosts: []mailworld.Host{{Name: "mx.fdot.test"}, {Name: "mx.under.test"}, {Name: "mx.catch.test"}},
		Domains: []mailworld.Domain{
			{Name: "fdot.test", MX: []string{"mx.fdot.test"},
				Users: []string{"a.brown", "c.davis", "n.evans", "g.ford", "info", "t.jackson", "m.wilson", "k.moore"}},
			{Name: "under.test", MX: []string{"mx.under.test"},
				Users: []string{"alice_brown", "carol_davis", "nora_evans", "thomas_jackson", "mary_wilson"}},
			{Name: "catch.test", MX: []string{"mx.catch.test"}, CatchAll: true, Users: []string{"a.brown", "c.davis"}},
		},
	}
}

// TestLearnFromVerification: a bulk verification job on the world's
// domains (the family's answering step, with the finder's teacher, on real
// Redis) teaches the shapes of its deliverable addresses and nothing from
// catch-all, role or refused ones; a lookup afterwards tries the shape's
// pattern first and finds people with fewer RCPTs than without it.
func TestLearnFromVerification(t *testing.T) {
	w := startWorld(t, teachWorld())
	ctx := context.Background()
	rdb, _ := testredis.Client(t)
	store := finder.NewRedisPatterns(rdb)

	fam := verification.New(newVerifier(t, w, rdb), nil)
	fam.Teacher = &finder.VerificationTeacher{Store: store}
	emails := []string{
		"a.brown@fdot.test", "c.davis@fdot.test", "n.evans@fdot.test", "g.ford@fdot.test",
		"info@fdot.test",     // role: teaches nothing
		"x.nobody@fdot.test", // refused: teaches nothing
		"alice_brown@under.test", "carol_davis@under.test", "nora_evans@under.test",
		"a.brown@catch.test", "c.davis@catch.test", // catch-all: teaches nothing
	}
	ans, err := fam.Answer(ctx, emails)
	if err != nil {
		t.Fatal(err)
	}
	// The same list verified again (a customer's weekly clean-up) adds
	// no evidence: each mailbox counts once.
	if _, err := fam.Answer(ctx, emails); err != nil {
		t.Fatal(err)
	}
	for i, a := range ans {
		t.Logf("%s: %s", emails[i], a.Outcome)
	}
	for dom, want := range map[string]map[string]int64{
		"fdot.test":  {"shape:i.w": 4},
		"under.test": {"shape:w_w": 3},
		"catch.test": {},
	} {
		got, err := store.Counts(ctx, dom)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != len(want) {
			t.Errorf("%s: counts %v, want %v", dom, got, want)
		}
		for k, n := range want {
			if got[k] != n {
				t.Errorf("%s: counts %v, want %v", dom, got, want)
			}
		}
		// A shape is not a learned pattern.
		if p, ok, _ := store.Get(ctx, dom); ok {
			t.Errorf("%s: the shape made %q the learned pattern", dom, p)
		}
	}

	people := []finder.Person{
		{FirstName: "Thomas", LastName: "Jackson", Domain: "fdot.test"},
		{FirstName: "Mary", LastName: "Wilson", Domain: "fdot.test"},
		{FirstName: "Kevin", LastName: "Moore", Domain: "fdot.test"},
		{FirstName: "Thomas", LastName: "Jackson", Domain: "under.test"},
		{FirstName: "Mary", LastName: "Wilson", Domain: "under.test"},
	}
	want := []string{"t.jackson@fdot.test", "m.wilson@fdot.test", "k.moore@fdot.test",
		"thomas_jackson@under.test", "mary_wilson@under.test"}
	rcpts := func(name string, res []finder.Result) int {
		n := 0
		for i, r := range res {
			n += r.ProbesUsed
			if r.Substatus != finder.SubVerified || str(r.Email) != want[i] {
				t.Errorf("%s: %s %s: %s, want %s", name, people[i].FirstName, people[i].Domain, describe(r), want[i])
			}
		}
		return n
	}
	// Without the verification's lesson: a store of its own.
	rdb2, _ := testredis.Client(t)
	before := rcpts("without", finder.New(newVerifier(t, w, rdb2), finder.NewRedisPatterns(rdb2)).Find(ctx, people))
	after := rcpts("with", finder.New(newVerifier(t, w, rdb), store).Find(ctx, people))
	t.Logf("RCPTs for %d people: %d without the verification's shapes, %d with them", len(people), before, after)
	if after != len(people) {
		t.Errorf("%d RCPTs with the shapes, want %d (the shape's pattern first, one per person)", after, len(people))
	}
	if after >= before {
		t.Errorf("%d RCPTs with the shapes, %d without: no saving", after, before)
	}
}

// TestLearnFromVerificationOff: without a teacher (the flag off) a
// verification job leaves the store untouched.
func TestLearnFromVerificationOff(t *testing.T) {
	w := startWorld(t, teachWorld())
	ctx := context.Background()
	rdb, _ := testredis.Client(t)
	store := finder.NewRedisPatterns(rdb)
	fam := verification.New(newVerifier(t, w, rdb), nil)
	if _, err := fam.Answer(ctx, []string{"a.brown@fdot.test", "c.davis@fdot.test"}); err != nil {
		t.Fatal(err)
	}
	if got, _ := store.Counts(ctx, "fdot.test"); len(got) != 0 {
		t.Errorf("counts %v without a teacher", got)
	}
}

// TestShapesOf: what one verification answer teaches. Only deliverable
// addresses on domains that are not catch-all, and not role, free or
// disposable; only local parts with one reading of separator and initials.
func TestShapesOf(t *testing.T) {
	ok := func(email string) verify.Result {
		return verify.Result{Email: email, Status: verify.StatusDeliverable, Reason: verify.ReasonAccepted}
	}
	role, free, disp, catch := ok("sales@a.test"), ok("jo.lee@free.test"), ok("j.lee@d.test"), ok("jo.lee@c.test")
	role.IsRole, free.IsFree, disp.IsDisposable, catch.IsCatchAll = true, true, true, true
	unknown := verify.Result{Email: "jo.lee@u.test", Status: verify.StatusUnknown, Reason: verify.ReasonGreylisted}
	risky := verify.Result{Email: "jo.lee@r.test", Status: verify.StatusRisky, Reason: verify.ReasonCatchAll, IsCatchAll: true}
	got := finder.ShapesOf([]verify.Result{
		ok("John.Smith@a.test"), ok("smith.john@a.test"), ok("j.smith@a.test"), ok("john.s@a.test"),
		ok("john_smith@a.test"), ok("j_smith@a.test"), ok("john-smith@a.test"), ok("j-smith@a.test"), ok("jsmith@a.test"),
		ok("j.s@a.test"), ok("john.smith2@a.test"), ok("anne-marie.oneil@a.test"), ok("a..b@a.test"), ok(".js@a.test"),
		role, free, disp, catch, unknown, risky, ok("john.smith@a.test"), // the same address again: once
	})
	want := map[string]int64{"w.w": 2, "i.w": 1, "w.i": 1, "w_w": 1, "i_w": 1, "w-w": 1, "i-w": 1, "joined": 1}
	n := map[string]int64{}
	for _, c := range got {
		if c.Domain != "a.test" {
			t.Errorf("%+v, want a.test only", c)
		}
		n[c.Shape]++
	}
	if len(n) != len(want) {
		t.Errorf("shapes %v, want %v", n, want)
	}
	for k, v := range want {
		if n[k] != v {
			t.Errorf("shapes %v, want %v", n, want)
		}
	}
}

// TestLearnFromVerificationPeopleWorld measures the lesson on the people
// world: per domain, the true addresses of half the people are verified in
// a bulk verification job (with the teacher), then the other half are
// looked up; the RCPTs are compared with the same lookup on a store that
// learned nothing. Every answer is checked against the truth.
func TestLearnFromVerificationPeopleWorld(t *testing.T) {
	if testing.Short() {
		t.Skip("people world")
	}
	spec, cases := mailworld.People(mailworld.PeopleOptions{Domains: 200, PerDomain: 10, RTT: time.Millisecond, Seed: 5, Greylist: time.Second})
	w := startWorld(t, spec)
	ctx := context.Background()
	var emails []string
	var asked []mailworld.PersonCase
	half := map[string]int{}
	for _, c := range cases {
		if c.Greylisted {
			continue // their answers would wait for retries in both runs alike
		}
		if c.Email != "" && half[c.Domain] < 5 {
			half[c.Domain]++
			emails = append(emails, c.Email)
			continue
		}
		asked = append(asked, c)
	}
	run := func(teach bool) (rcpts, findable int, res []finder.Result) {
		rdb, _ := testredis.Client(t)
		store := finder.NewRedisPatterns(rdb)
		if teach {
			fam := verification.New(newVerifier(t, w, rdb), nil)
			fam.Teacher = &finder.VerificationTeacher{Store: store}
			if _, err := fam.Answer(ctx, emails); err != nil {
				t.Fatal(err)
			}
		}
		res = finder.New(newVerifier(t, w, rdb), store).Find(ctx, peopleOf(asked))
		for i, r := range res {
			rcpts += r.ProbesUsed
			if asked[i].Findable {
				findable += r.ProbesUsed
			}
			checkAnswer(t, asked[i], r)
		}
		return rcpts, findable, res
	}
	nf := 0
	for _, c := range asked {
		if c.Findable {
			nf++
		}
	}
	before, bf, _ := run(false)
	after, af, _ := run(true)
	t.Logf("%d addresses verified on %d domains; %d people looked up (%d findable): %d RCPTs (%.2f per person; findable %.2f) without the shapes, %d (%.2f; findable %.2f) with them",
		len(emails), len(half), len(asked), nf, before, float64(before)/float64(len(asked)), float64(bf)/float64(nf),
		after, float64(after)/float64(len(asked)), float64(af)/float64(nf))
	if after >= before {
		t.Errorf("%d RCPTs with the shapes, %d without", after, before)
	}
}
