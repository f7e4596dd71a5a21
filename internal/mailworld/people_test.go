package mailworld

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestPeopleDeterministic(t *testing.T) {
	o := PeopleOptions{Domains: 40, PerDomain: 10, Seed: 7}
	s1, c1 := People(o)
	s2, c2 := People(o)
	if !reflect.DeepEqual(s1, s2) || !reflect.DeepEqual(c1, c2) {
		t.Fatal("the same options gave two worlds")
	}
	o.Seed = 8
	_, c3 := People(o)
	if reflect.DeepEqual(c1, c3) {
		t.Fatal("another seed gave the same people")
	}
}

// plain reports whether s has only the letters a-z.
func plain(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 'a' || s[i] > 'z' {
			return false
		}
	}
	return true
}

// TestPeopleMix checks the shape of the people world: sizes, the mix of
// domains, the truth of every case against the directory, and that no
// person's candidate is another person's address.
func TestPeopleMix(t *testing.T) {
	spec, cases := People(PeopleOptions{Domains: 500, PerDomain: 20, Seed: 1})
	if len(cases) != 10_000 {
		t.Fatalf("%d cases, want 10000", len(cases))
	}
	if err := func() error {
		w := &World{spec: spec, byName: map[string]*host{}, domains: map[string]*domain{}}
		return w.build()
	}(); err != nil {
		t.Fatalf("spec does not build: %v", err)
	}
	doms := map[string]Domain{}
	for _, d := range spec.Domains {
		doms[d.Name] = d
	}
	if len(doms) != 500 {
		t.Fatalf("%d domains", len(doms))
	}
	kinds := map[string]int{}
	for _, d := range spec.Domains {
		switch {
		case d.DNS == DNSNXDomain:
			kinds["nxdomain"]++
		case d.DNS == DNSNullMX:
			kinds["nullmx"]++
		case d.DNS == DNSNoMail:
			kinds["nomail"]++
		case d.CatchAll:
			kinds["catchall"]++
		case d.Greylist > 0:
			kinds["greylist"]++
		default:
			kinds["normal"]++
		}
	}
	want := map[string]int{"nxdomain": 15, "nullmx": 15, "nomail": 5, "catchall": 40, "greylist": 15, "normal": 410}
	if !reflect.DeepEqual(kinds, want) {
		t.Errorf("domain mix %v, want %v", kinds, want)
	}
	shared := 0
	for _, d := range spec.Domains {
		if len(d.MX) > 0 && !strings.HasSuffix(d.MX[0], d.Name) {
			shared++
		}
	}
	if shared < 100 || shared > 180 {
		t.Errorf("%d domains on shared hosts, want about 30%% of 470", shared)
	}

	byDomain := map[string][]PersonCase{}
	emails := map[string]bool{}
	var inDir, findable, special, initials int
	patterns := map[string]int{}
	for _, c := range cases {
		byDomain[c.Domain] = append(byDomain[c.Domain], c)
		d, ok := doms[c.Domain]
		if !ok {
			t.Fatalf("%+v: unknown domain", c)
		}
		if c.Email != "" {
			inDir++
			if emails[c.Email] {
				t.Errorf("%s twice", c.Email)
			}
			emails[c.Email] = true
			local, dom, _ := strings.Cut(c.Email, "@")
			if dom != c.Domain {
				t.Errorf("%+v: email on another domain", c)
			}
			if !contains(d.Users, local) {
				t.Errorf("%+v: %s is not a user of %s", c, local, d.Name)
			}
			first, last := strings.ToLower(strings.TrimSpace(c.FirstName)), strings.ToLower(strings.TrimSpace(c.LastName))
			if plain(first + last) {
				if got := RenderPattern(c.Pattern, first, last); got != local {
					t.Errorf("%+v: pattern writes %s", c, got)
				}
			}
		}
		if !plain(strings.ToLower(strings.TrimSpace(c.FirstName)+strings.TrimSpace(c.LastName))) && !strings.HasSuffix(strings.TrimSpace(c.FirstName), ".") {
			special++
		}
		if strings.HasSuffix(strings.TrimSpace(c.FirstName), ".") {
			initials++
			if !c.Findable && !c.CatchAll && c.Email == "" {
				t.Errorf("%+v: a person asked by initial is not in the directory", c)
			}
		}
		switch {
		case d.DNS != DNSMX:
			if c.Reason == "" || c.Email != "" || c.Findable || c.Pattern != "" {
				t.Errorf("%+v: domain without mail", c)
			}
		case d.CatchAll:
			if !c.CatchAll || c.Findable {
				t.Errorf("%+v: catch-all", c)
			}
		default:
			if c.Findable != (c.Email != "") || c.Greylisted != (d.Greylist > 0) || c.CatchAll || c.Reason != "" {
				t.Errorf("%+v: ordinary domain", c)
			}
		}
		if c.Findable {
			findable++
			patterns[c.Pattern]++
		}
	}
	t.Logf("%d in the directory, %d findable, %d with unicode or compound names, %d by initial, patterns %v", inDir, findable, special, initials, patterns)
	if inDir < 7000 || inDir > 8000 {
		t.Errorf("%d of 10000 in a directory", inDir)
	}
	if special < 400 || initials < 50 || len(patterns) != len(PeoplePatterns) {
		t.Errorf("too little variety: %d unicode, %d initials, %d patterns", special, initials, len(patterns))
	}

	// Within a domain, names are distinct and no plain person's candidate
	// under any usual pattern is another user's address.
	for dn, cs := range byDomain {
		firsts, lasts := map[string]bool{}, map[string]bool{}
		users := map[string]bool{}
		for _, u := range doms[dn].Users {
			users[u] = true
		}
		for _, c := range cs {
			first, last := strings.ToLower(strings.TrimSpace(c.FirstName)), strings.ToLower(strings.TrimSpace(c.LastName))
			if firsts[first] || lasts[last] {
				t.Errorf("%s: name repeated: %s %s", dn, first, last)
			}
			firsts[first], lasts[last] = true, true
			if !plain(first + last) {
				continue
			}
			own, _, _ := strings.Cut(c.Email, "@")
			for a := range footprint([][2]string{{first, last}}) {
				if users[a] && a != own {
					t.Errorf("%s: %s %s's candidate %s is another user's address", dn, first, last, a)
				}
			}
		}
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if strings.EqualFold(x, s) {
			return true
		}
	}
	return false
}

// TestPeopleAgreeWithTheWorld runs the reference verifier of
// TestCasesAgreeWithTheWorld over a small people world: every true address
// is accepted (catch-all on catch-all domains), domains without mail give
// their reason, and a person not in the directory is unknown there.
func TestPeopleAgreeWithTheWorld(t *testing.T) {
	spec, cases := People(PeopleOptions{Domains: 30, PerDomain: 6, RTT: -1, Seed: 3, Greylist: testOpts.Greylist})
	w := start(t, spec)
	var checked, absent int
	for _, c := range cases {
		switch {
		case c.Reason != "":
			if _, reason := refVerify(w, "someone@"+c.Domain, nil); reason != c.Reason {
				t.Errorf("%+v: reason %s", c, reason)
			}
		case c.Email != "":
			status, reason := refVerify(w, c.Email, nil)
			want := "accepted"
			if c.CatchAll {
				want = "catch_all"
			}
			if reason != want {
				t.Errorf("%+v: %s/%s, want %s", c, status, reason, want)
			}
			checked++
		case !c.CatchAll && !c.Greylisted:
			first, last := strings.ToLower(strings.TrimSpace(c.FirstName)), strings.ToLower(strings.TrimSpace(c.LastName))
			if !plain(first + last) {
				continue
			}
			if _, reason := refVerify(w, RenderPattern(c.Pattern, first, last)+"@"+c.Domain, nil); reason != "mailbox_not_found" {
				t.Errorf("%+v: not in the directory, but %s", c, reason)
			}
			absent++
		}
	}
	if checked < 100 || absent < 10 {
		t.Errorf("only %d addresses and %d absent people checked", checked, absent)
	}
}

func TestPeopleDefaults(t *testing.T) {
	start := time.Now()
	spec, cases := People(PeopleOptions{})
	if len(cases) != 50*20 || spec.RTT != 50*time.Millisecond || len(spec.Domains) != 50 {
		t.Fatalf("defaults: %d cases, RTT %v, %d domains", len(cases), spec.RTT, len(spec.Domains))
	}
	for _, d := range spec.Domains {
		if d.Greylist != 0 && d.Greylist != 2*time.Second {
			t.Errorf("%s greylists %v", d.Name, d.Greylist)
		}
	}
	t.Logf("generated in %v", time.Since(start))
}
