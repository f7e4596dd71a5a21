package finder_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bulkd/bulkd/internal/finder"
	"github.com/bulkd/bulkd/internal/mailworld"
	"github.com/bulkd/bulkd/internal/outbound"
	"github.com/bulkd/bulkd/internal/testredis"
	"github.com/bulkd/bulkd/internal/verify"
)

func startWorld(tb testing.TB, spec mailworld.Spec) *mailworld.World {
	tb.Helper()
	w, err := mailworld.Start(context.Background(), spec)
	if err != nil {
		tb.Fatalf("mailworld: %v", err)
	}
	tb.Cleanup(func() { _ = w.Close() })
	return w
}

// newVerifier is one process's verifier: its own caches, the politeness
// limiter and catch-all probes shared through Redis.
func newVerifier(tb testing.TB, w *mailworld.World, rdb redis.UniversalClient) *verify.Verifier {
	tb.Helper()
	cfg := verify.Config{
		DNSServer:      w.DNSAddr(),
		SMTPPort:       w.SMTPPort(),
		DNSTimeout:     500 * time.Millisecond,
		DialTimeout:    time.Second,
		CommandTimeout: 3 * time.Second,
		SessionTimeout: 30 * time.Second,
		// The world's hosts are on loopback: the operator's allowance.
		Policy: &outbound.Policy{Allow: outbound.LoopbackPrefixes},
	}
	var lim verify.HostLimiter
	if rdb != nil {
		cfg.Probes = verify.NewRedisProbes(rdb)
		lim = verify.NewRedisLimiter(rdb, verify.LimiterOptions{SessionsPerHost: 3})
	}
	v, err := verify.New(cfg, nil, lim)
	if err != nil {
		tb.Fatal(err)
	}
	return v
}

func peopleOf(cases []mailworld.PersonCase) []finder.Person {
	out := make([]finder.Person, len(cases))
	for i, c := range cases {
		out[i] = finder.Person{FirstName: c.FirstName, LastName: c.LastName, Domain: c.Domain}
	}
	return out
}

func str(p *string) string {
	if p == nil {
		return "<nil>"
	}
	return *p
}

func describe(r finder.Result) string {
	conf := -1
	if r.Confidence != nil {
		conf = *r.Confidence
	}
	return fmt.Sprintf("%s/%s %s conf=%d temp=%v probes=%d", r.Status, r.Substatus, str(r.Email), conf, r.Temporary, r.ProbesUsed)
}

func plain(s string) bool {
	s = strings.ToLower(strings.TrimSpace(s))
	for i := 0; i < len(s); i++ {
		if s[i] < 'a' || s[i] > 'z' {
			return false
		}
	}
	return s != ""
}

// checkAnswer checks one answer against the world's truth on the first
// pass (greylisting domains are expected to answer Temporary).
func checkAnswer(t *testing.T, c mailworld.PersonCase, r finder.Result) {
	t.Helper()
	bad := func(why string) { t.Errorf("%s %s @ %s: %s: %s", c.FirstName, c.LastName, c.Domain, why, describe(r)) }
	if r.Status == finder.StatusFound && r.Substatus == finder.SubVerified && !strings.EqualFold(str(r.Email), c.Email) {
		bad("WRONG ADDRESS (truth " + c.Email + ")")
	}
	switch {
	case c.Reason != "":
		if r.Status != finder.StatusNotFound || r.Substatus != c.Reason || r.ProbesUsed != 0 || r.Email != nil {
			bad("want not_found/" + c.Reason + " without probes")
		}
	case c.Greylisted:
		if r.Status != finder.StatusNotFound || r.Substatus != finder.SubUnknown || !r.Temporary || r.RetryAfter <= 0 {
			bad("want not_found/unknown, temporary")
		}
	case c.CatchAll:
		if r.Status != finder.StatusFound || r.Substatus != finder.SubCatchAllGuess || r.IsCatchAll == nil || !*r.IsCatchAll ||
			r.Confidence == nil || *r.Confidence != finder.ConfidenceCatchAllGuess || r.Email == nil {
			bad("want found/catch_all_guess")
		}
		if r.Email != nil && !strings.HasSuffix(*r.Email, "@"+c.Domain) {
			bad("guess on another domain")
		}
	case c.Findable:
		if r.Status != finder.StatusFound || r.Substatus != finder.SubVerified || !strings.EqualFold(str(r.Email), c.Email) {
			bad("want found/verified " + c.Email)
			return
		}
		if r.Confidence == nil || *r.Confidence < 90 || r.IsCatchAll == nil || *r.IsCatchAll || r.MXRecord == nil ||
			r.EmailProvider == nil || r.IsRole == nil || r.IsFree == nil || r.IsDisposable == nil || r.Temporary {
			bad("enrichment fields")
		}
	default: // not in the directory of an ordinary domain
		if r.Status != finder.StatusNotFound || r.Substatus != finder.SubNoMatch || r.Email != nil || r.Confidence != nil {
			bad("want not_found/no_match")
		}
	}
}

// TestFindPeopleWorld asks for every person of a people world at once:
// every findable person is found with the true address, no address on an
// ordinary domain is wrong, catch-all domains give the top guess (found,
// low confidence), domains without mail answer at once with their reason,
// greylisting domains answer Temporary and are found on retries.
func TestFindPeopleWorld(t *testing.T) {
	spec, cases := mailworld.People(mailworld.PeopleOptions{Domains: 40, PerDomain: 8, RTT: 2 * time.Millisecond, Seed: 11, Greylist: time.Second})
	w := startWorld(t, spec)
	rdb, _ := testredis.Client(t)
	f := finder.New(newVerifier(t, w, rdb), finder.NewRedisPatterns(rdb))
	mx := map[string]string{}
	for _, d := range spec.Domains {
		if len(d.MX) > 0 {
			mx[d.Name] = d.MX[0]
		}
	}
	people := peopleOf(cases)
	// Domains are read as company enrichment reads them.
	for i := range people {
		switch i % 10 {
		case 3:
			people[i].Domain = "https://www." + people[i].Domain + "/team"
		case 7:
			people[i].Domain = strings.ToUpper(people[i].Domain) + "."
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	start := time.Now()
	res := f.Find(ctx, people)
	t.Logf("%d people over %d domains in %v, %d RCPTs (probes included), %d sessions", len(people), len(spec.Domains),
		time.Since(start).Round(time.Millisecond), w.Stats().Rcpts, w.Stats().Sessions)
	if len(res) != len(cases) {
		t.Fatalf("%d results for %d people", len(res), len(cases))
	}
	counts := map[string]int{}
	var catchRight, catchAll, providers int
	for i, c := range cases {
		r := res[i]
		counts[r.Status+"/"+r.Substatus]++
		checkAnswer(t, c, r)
		if c.CatchAll && c.Email != "" {
			catchAll++
			if strings.EqualFold(str(r.Email), c.Email) {
				catchRight++
			}
		}
		if r.Substatus == finder.SubVerified {
			want := "other"
			switch mx[c.Domain] {
			case "aspmx.l.google.com":
				want = "google"
			case "mail.protection.outlook.com":
				want = "microsoft"
			}
			if str(r.EmailProvider) != want || str(r.MXRecord) != mx[c.Domain] {
				t.Errorf("%s: provider %s mx %s, want %s %s", c.Email, str(r.EmailProvider), str(r.MXRecord), want, mx[c.Domain])
			}
			if want != "other" {
				providers++
			}
		}
	}
	t.Logf("answers %v; catch-all guesses right %d/%d; %d found at google/microsoft", counts, catchRight, catchAll, providers)
	if providers == 0 {
		t.Error("no domain hosted at google or microsoft was found")
	}

	// Greylisting domains: retried after the greylisting period, as the
	// job engine does, every findable person is found within two retries
	// and nobody gets a wrong address.
	var again []int
	for i, r := range res {
		if r.Temporary {
			again = append(again, i)
		}
	}
	if len(again) == 0 {
		t.Fatal("no greylisting domain in the world")
	}
	for pass := 1; pass <= 2 && len(again) > 0; pass++ {
		time.Sleep(1100 * time.Millisecond)
		var ps []finder.Person
		for _, i := range again {
			ps = append(ps, people[i])
		}
		rr := f.Find(ctx, ps)
		var next []int
		for k, i := range again {
			res[i] = rr[k]
			if rr[k].Temporary {
				next = append(next, i)
			}
		}
		t.Logf("retry %d: %d asked, %d still temporary", pass, len(again), len(next))
		again = next
	}
	for i, c := range cases {
		if !c.Greylisted {
			continue
		}
		r := res[i]
		switch {
		case c.Findable && (r.Substatus != finder.SubVerified || !strings.EqualFold(str(r.Email), c.Email)):
			t.Errorf("greylisted %s after retries: %s", c.Email, describe(r))
		case !c.Findable && r.Substatus != finder.SubNoMatch:
			t.Errorf("greylisted, not in the directory, %s %s after retries: %s", c.FirstName, c.LastName, describe(r))
		}
	}
}

// TestLearnedPatternAnotherProcess: half of every ordinary domain's people
// teach the domain's pattern; another process (a new verifier and Finder
// sharing only Redis) then finds the other half at about one RCPT each. A
// catch-all domain with a pattern already in Redis answers with that
// pattern's address (catch_all_pattern, medium confidence).
func TestLearnedPatternAnotherProcess(t *testing.T) {
	spec, cases := mailworld.People(mailworld.PeopleOptions{Domains: 30, PerDomain: 12, RTT: 2 * time.Millisecond, Seed: 5})
	w := startWorld(t, spec)
	rdb, _ := testredis.Client(t)
	ctx := context.Background()

	var first, second, catchAll []mailworld.PersonCase
	seen := map[string]int{}
	for _, c := range cases {
		switch {
		case c.CatchAll:
			catchAll = append(catchAll, c)
		case c.Findable && !c.Greylisted:
			if seen[c.Domain]%2 == 0 {
				first = append(first, c)
			} else {
				second = append(second, c)
			}
			seen[c.Domain]++
		}
	}
	a := finder.New(newVerifier(t, w, rdb), finder.NewRedisPatterns(rdb))
	ra := a.Find(ctx, peopleOf(first))
	probesA := 0
	for i, c := range first {
		checkAnswer(t, c, ra[i])
		probesA += ra[i].ProbesUsed
	}
	store := finder.NewRedisPatterns(rdb)
	for d := range seen {
		p, ok, err := store.Get(ctx, d)
		if err != nil || !ok {
			t.Errorf("%s: no pattern learned (%v)", d, err)
			continue
		}
		for _, c := range first {
			if c.Domain == d && p != c.Pattern {
				t.Errorf("%s: learned %s, the domain uses %s", d, p, c.Pattern)
				break
			}
		}
	}
	// Patterns already in Redis for the catch-all domains.
	for _, c := range catchAll {
		if err := store.Learn(ctx, c.Domain, c.Pattern); err != nil {
			t.Fatal(err)
		}
	}

	w.ResetStats()
	b := finder.New(newVerifier(t, w, rdb), finder.NewRedisPatterns(rdb))
	start := time.Now()
	rb := b.Find(ctx, peopleOf(second))
	st := w.Stats()
	probesB, compound := 0, 0
	for i, c := range second {
		checkAnswer(t, c, rb[i])
		probesB += rb[i].ProbesUsed
		if !plain(c.FirstName) || !plain(c.LastName) {
			compound++
		}
	}
	t.Logf("process A: %d people, %.2f RCPTs each; process B: %d people in %v, %.2f candidate RCPTs each, %d RCPTs with %d catch-all probes (%d domains)",
		len(first), float64(probesA)/float64(len(first)), len(second), time.Since(start).Round(time.Millisecond),
		float64(probesB)/float64(len(second)), st.Rcpts, st.Rcpts-int64(probesB), len(seen))
	// One RCPT per person; a compound name may need its other forms.
	if probesB > len(second)+2*compound {
		t.Errorf("process B spent %d RCPTs on %d people (%d compound names)", probesB, len(second), compound)
	}
	if st.Rcpts > int64(probesB+len(seen)) {
		t.Errorf("process B sent %d RCPTs: more than its candidates and one probe per domain", st.Rcpts)
	}

	rc := b.Find(ctx, peopleOf(catchAll))
	right := 0
	for i, c := range catchAll {
		r := rc[i]
		if r.Status != finder.StatusFound || r.Substatus != finder.SubCatchAllPattern || r.Confidence == nil ||
			*r.Confidence != finder.ConfidenceCatchAllPattern || r.IsCatchAll == nil || !*r.IsCatchAll {
			t.Errorf("catch-all %s %s: %s", c.FirstName, c.LastName, describe(r))
		}
		if c.Email != "" && plain(c.FirstName) && plain(c.LastName) && !strings.EqualFold(str(r.Email), c.Email) {
			t.Errorf("catch-all %s with a stored pattern: %s", c.Email, describe(r))
		}
		if strings.EqualFold(str(r.Email), c.Email) {
			right++
		}
	}
	t.Logf("catch-all with stored patterns: %d/%d addresses right", right, len(catchAll))
}

// TestStalePattern: a domain's stored pattern that nobody there uses any
// more is distrusted after two refusals; the domain's people are still
// found, and the right pattern outweighs the stale one.
func TestStalePattern(t *testing.T) {
	spec := mailworld.Spec{
		Hosts: []mailworld.Host{{Name: "mx.stale.test"}},
		Domains: []mailworld.Domain{{Name: "stale.test", MX: []string{"mx.stale.test"},
			Users: []string{"smith.john", "doe.jane", "roe.rick", "info"}}},
	}
	w := startWorld(t, spec)
	rdb, _ := testredis.Client(t)
	ctx := context.Background()
	store := finder.NewRedisPatterns(rdb)
	if err := store.Learn(ctx, "stale.test", "{f}{last}"); err != nil {
		t.Fatal(err)
	}
	f := finder.New(newVerifier(t, w, rdb), store)
	res := f.Find(ctx, []finder.Person{{"John", "Smith", "stale.test"}, {"Jane", "Doe", "stale.test"}, {"Rick", "Roe", "stale.test"}, {"Nobody", "Here", "stale.test"}})
	for i, want := range []string{"smith.john", "doe.jane", "roe.rick"} {
		if str(res[i].Email) != want+"@stale.test" || res[i].Substatus != finder.SubVerified {
			t.Errorf("%s: %s", want, describe(res[i]))
		}
	}
	if res[3].Substatus != finder.SubNoMatch {
		t.Errorf("nobody: %s", describe(res[3]))
	}
	counts, err := store.Counts(ctx, "stale.test")
	if err != nil {
		t.Fatal(err)
	}
	if p, _, _ := store.Get(ctx, "stale.test"); p != "{last}.{first}" {
		t.Errorf("best pattern %s, counts %v", p, counts)
	}
	t.Logf("counts %v, RCPTs %d", counts, w.Stats().Rcpts)
}

// TestInvalidAndDuplicates: invalid names and domains are answered without
// a single RCPT; a repeated person gets the same answer, counted once.
func TestInvalidAndDuplicates(t *testing.T) {
	spec := mailworld.Spec{
		Hosts:   []mailworld.Host{{Name: "mx.acme.test"}},
		Domains: []mailworld.Domain{{Name: "acme.test", MX: []string{"mx.acme.test"}, Users: []string{"jose.nunez"}}},
	}
	w := startWorld(t, spec)
	f := finder.New(newVerifier(t, w, nil), nil)
	ctx := context.Background()
	if got := f.Find(ctx, nil); len(got) != 0 {
		t.Fatalf("no people: %v", got)
	}
	people := []finder.Person{
		{"", "Smith", "acme.test"},
		{"李", "王", "acme.test"},
		{"John", "Smith", "not a domain"},
		{"John", "Smith", "localhost"},
		{"John", "Smith", "192.0.2.1"},
		{"John", "Smith", ""},
		{"  '- ", "Smith", "acme.test"},
	}
	for i, r := range f.Find(ctx, people) {
		want := finder.SubInvalidName
		if i >= 2 && i <= 5 {
			want = finder.SubInvalidDomain
		}
		if r.Status != finder.StatusNotFound || r.Substatus != want || r.Email != nil || r.ProbesUsed != 0 {
			t.Errorf("%+v: %s, want not_found/%s", people[i], describe(r), want)
		}
	}
	if st := w.Stats(); st.Rcpts != 0 || st.Sessions != 0 {
		t.Errorf("invalid input reached the mail server: %+v", st)
	}
	res := f.Find(ctx, []finder.Person{{"José", "Ñúñez", "acme.test"}, {"Jose", "Nunez", "www.acme.test"}, {"JOSÉ ", "ÑÚÑEZ", "acme.test"}})
	for i, r := range res {
		if str(r.Email) != "jose.nunez@acme.test" || r.Substatus != finder.SubVerified {
			t.Errorf("%d: %s", i, describe(r))
		}
	}
	if res[0].ProbesUsed != 1 || res[1].ProbesUsed != 0 || res[2].ProbesUsed != 0 {
		t.Errorf("probes %d %d %d", res[0].ProbesUsed, res[1].ProbesUsed, res[2].ProbesUsed)
	}
}

// TestContextEnds: a call cut short answers everyone unknown, Temporary,
// and returns promptly.
func TestContextEnds(t *testing.T) {
	spec, cases := mailworld.People(mailworld.PeopleOptions{Domains: 10, PerDomain: 5, RTT: 400 * time.Millisecond, Seed: 2})
	w := startWorld(t, spec)
	f := finder.New(newVerifier(t, w, nil), nil)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	res := f.Find(ctx, peopleOf(cases))
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("returned after %v", d)
	}
	for i, c := range cases {
		r := res[i]
		if c.Reason != "" {
			continue // DNS answered in time
		}
		if r.Status != finder.StatusNotFound || r.Substatus != finder.SubUnknown || !r.Temporary {
			t.Errorf("%s %s: %s", c.FirstName, c.LastName, describe(r))
		}
	}
}

// TestCatchAllCost: on a catch-all domain of a few people each costs one
// RCPT (the first candidate, sent before the verdict is known); on a
// domain of many only the scouts' candidates are sent, and everyone gets
// the top-prior guess.
func TestCatchAllCost(t *testing.T) {
	spec := mailworld.Spec{
		Hosts: []mailworld.Host{{Name: "mx.all.test"}},
		Domains: []mailworld.Domain{{Name: "all.test", MX: []string{"mx.all.test"}, CatchAll: true},
			{Name: "big.test", MX: []string{"mx.all.test"}, CatchAll: true}},
	}
	w := startWorld(t, spec)
	f := finder.New(newVerifier(t, w, nil), nil)
	lasts := []string{"Adams", "Baker", "Clark", "Davis", "Evans", "Fisher", "Green", "Hughes", "Irving", "Jones"}
	var small, big []finder.Person
	for i, n := range lasts {
		if i < 3 {
			small = append(small, finder.Person{FirstName: "Pat", LastName: n, Domain: "all.test"})
		}
		big = append(big, finder.Person{FirstName: "Sam", LastName: n, Domain: "big.test"})
	}
	for _, c := range []struct {
		people []finder.Person
		rcpts  int64
	}{{small, 3 + 1}, {big, 2*4 + 1}} {
		w.ResetStats()
		res := f.Find(context.Background(), c.people)
		for i, r := range res {
			p := c.people[i]
			want := strings.ToLower(p.FirstName+"."+p.LastName) + "@" + p.Domain
			if r.Substatus != finder.SubCatchAllGuess || str(r.Email) != want || r.IsRole == nil || *r.IsRole ||
				r.IsCatchAll == nil || !*r.IsCatchAll || str(r.MXRecord) != "mx.all.test" {
				t.Errorf("%s: %s", want, describe(r))
			}
			if len(c.people) <= 4 && r.ProbesUsed != 1 {
				t.Errorf("%s: %d RCPTs", want, r.ProbesUsed)
			}
		}
		if st := w.Stats(); st.Rcpts > c.rcpts {
			t.Errorf("%d RCPTs for %d people", st.Rcpts, len(c.people))
		}
	}
}

// TestInProcessPatterns: without a store, a Finder remembers what it
// learned for its later calls; a full mailbox ends the search for its
// person without an address.
func TestInProcessPatterns(t *testing.T) {
	spec := mailworld.Spec{
		Hosts: []mailworld.Host{{Name: "mx.acme.test"}},
		Domains: []mailworld.Domain{{Name: "acme.test", MX: []string{"mx.acme.test"},
			Users: []string{"asmith", "bjones", "cbrown", "dgreen"}, Full: []string{"ewhite"}}},
	}
	w := startWorld(t, spec)
	f := finder.New(newVerifier(t, w, nil), nil)
	ctx := context.Background()
	res := f.Find(ctx, []finder.Person{{"Ann", "Smith", "acme.test"}, {"Eve", "White", "acme.test"}})
	if str(res[0].Email) != "asmith@acme.test" {
		t.Errorf("ann: %s", describe(res[0]))
	}
	if res[1].Status != finder.StatusNotFound || res[1].Substatus != finder.SubUnknown || res[1].Email != nil {
		t.Errorf("full mailbox: %s", describe(res[1]))
	}
	w.ResetStats()
	res = f.Find(ctx, []finder.Person{{"Bob", "Jones", "acme.test"}, {"Cy", "Brown", "acme.test"}, {"Di", "Green", "acme.test"}})
	for _, r := range res {
		if r.Substatus != finder.SubVerified || r.ProbesUsed != 1 {
			t.Errorf("second call: %s", describe(r))
		}
	}
	if st := w.Stats(); st.Rcpts != 3 { // the catch-all verdict is cached in the verifier
		t.Errorf("%d RCPTs for 3 people of a learned domain", st.Rcpts)
	}
}

// TestScoutsFail: when the scouts are not in the directory, the next
// people scout, and after four failed scouts everyone searches; the
// domain's people are all found and the non-employees are no_match.
func TestScoutsFail(t *testing.T) {
	firsts := []string{"Ada", "Ben", "Cal", "Dee", "Eve", "Fay", "Gus", "Hal", "Ivy", "Jon"}
	lasts := []string{"Abel", "Bond", "Cole", "Dunn", "Eads", "Ford", "Gale", "Hart", "Ives", "Judd"}
	var users []string
	var people []finder.Person
	for i := range firsts {
		people = append(people, finder.Person{FirstName: firsts[i], LastName: lasts[i], Domain: "odd.test"})
		if i >= 4 {
			users = append(users, strings.ToLower(lasts[i]+firsts[i][:1])) // {last}{f}
		}
	}
	spec := mailworld.Spec{
		Hosts:   []mailworld.Host{{Name: "mx.odd.test"}},
		Domains: []mailworld.Domain{{Name: "odd.test", MX: []string{"mx.odd.test"}, Users: users}},
	}
	w := startWorld(t, spec)
	f := finder.New(newVerifier(t, w, nil), nil)
	res := f.Find(context.Background(), people)
	total := 0
	for i, r := range res {
		total += r.ProbesUsed
		if i < 4 {
			if r.Substatus != finder.SubNoMatch || r.ProbesUsed != finder.MaxCandidates {
				t.Errorf("%v: %s", people[i], describe(r))
			}
			continue
		}
		want := strings.ToLower(people[i].LastName+people[i].FirstName[:1]) + "@odd.test"
		if r.Substatus != finder.SubVerified || str(r.Email) != want {
			t.Errorf("%v: %s, want %s", people[i], describe(r), want)
		}
	}
	t.Logf("%d RCPTs for %d people", total, len(people))
}

// TestGreylistedSecondFormsWithinTwoRetries: on a greylisting domain whose
// pattern is learned during the call, a person whose address is not the
// first form the pattern writes (anne.oneil for Anne-Marie: annemarie,
// anne-marie, then anne) is found within two retries, like everyone else:
// when the pattern's candidates are greylisted, every remaining form is
// sent once so the retry finds them all past the greylist. (Without that,
// each retry passed one form and greylisted the next.)
func TestGreylistedSecondFormsWithinTwoRetries(t *testing.T) {
	rdb, _ := testredis.Client(t)
	w := startWorld(t, mailworld.Spec{
		Hosts: []mailworld.Host{{Name: "mx.grey.test"}},
		Domains: []mailworld.Domain{{Name: "grey.test", MX: []string{"mx.grey.test"}, Greylist: 500 * time.Millisecond,
			Users: []string{"jan.smith", "mia.jones", "ola.berg", "tom.hill", "eva.lind", "anne.oneil", "ana.garcia"}}},
	})
	f := finder.New(newVerifier(t, w, rdb), finder.NewRedisPatterns(rdb))
	people := []finder.Person{
		{FirstName: "Jan", LastName: "Smith", Domain: "grey.test"}, {FirstName: "Mia", LastName: "Jones", Domain: "grey.test"},
		{FirstName: "Ola", LastName: "Berg", Domain: "grey.test"}, {FirstName: "Tom", LastName: "Hill", Domain: "grey.test"},
		{FirstName: "Eva", LastName: "Lind", Domain: "grey.test"},
		{FirstName: "Anne-Marie", LastName: "O'Neil", Domain: "grey.test"},
		{FirstName: "Ana Sofía", LastName: "García Márquez", Domain: "grey.test"},
		{FirstName: "Ludwig", LastName: "von Beethoven", Domain: "grey.test"},
	}
	want := []string{"jan.smith", "mia.jones", "ola.berg", "tom.hill", "eva.lind", "anne.oneil", "ana.garcia", ""}
	ctx := context.Background()
	res := f.Find(ctx, people)
	for pass := 1; pass <= 2; pass++ {
		time.Sleep(600 * time.Millisecond)
		var idx []int
		var ps []finder.Person
		for i, r := range res {
			if r.Temporary {
				idx, ps = append(idx, i), append(ps, people[i])
			}
		}
		if len(ps) == 0 {
			break
		}
		for k, r := range f.Find(ctx, ps) {
			res[idx[k]] = r
		}
	}
	for i, r := range res {
		switch {
		case want[i] == "" && r.Substatus != finder.SubNoMatch:
			t.Errorf("%s %s: %s, want not_found/no_match", people[i].FirstName, people[i].LastName, describe(r))
		case want[i] != "" && (r.Substatus != finder.SubVerified || str(r.Email) != want[i]+"@grey.test"):
			t.Errorf("%s %s: %s, want %s@grey.test", people[i].FirstName, people[i].LastName, describe(r), want[i])
		}
	}
}
