package finder

import (
	"slices"
	"strings"
	"testing"
)

func TestNormalizeName(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"  José ", "jose"},
		{"Ñúñez", "nunez"},
		{"Anne-Marie", "anne-marie"},
		{"Anne – Marie", "anne-marie"},
		{"O'Neil", "oneil"},
		{"O’Neil", "oneil"},
		{"O´Neil", "oneil"},
		{"D`Angelo", "dangelo"},
		{"van der Berg", "van.der.berg"},
		{"de la Cruz", "de.la.cruz"},
		{"McDonald", "mcdonald"},
		{"Zoë", "zoe"},
		{"Ødegård", "odegard"},
		{"Straße", "strasse"},
		{"Łukasz", "lukasz"},
		{"Đorđe", "dorde"},
		{"Þór", "thor"},
		{"Ольга", "olga"},
		{"Йорк", "york"},
		{"Σωκράτης", "sokratis"},
		{"J.", "j"},
		{"J.R.R.", "j.r.r"},
		{"J. R.", "j.r"},
		{"ＪＯＨＮ", "john"},  // full width (NFKC)
		{"ﬁona", "fiona"}, // ligature (NFKC)
		{"İlker", "ilker"},
		{"Paral·lel", "parallel"},
		{"李", ""},
		{"李 Wei", "wei"},
		{"x\u200dy", "xy"},
		{"--", ""},
		{"Smith Jr.", "smith.jr"},
		{"a_b", "a.b"},
		{"a . - b", "a-b"},
		{"\xff\xfeab", "ab"},
	} {
		if got := NormalizeName(c.in); got != c.want {
			t.Errorf("NormalizeName(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestNameForms(t *testing.T) {
	for _, c := range []struct {
		in          string
		first, last []string
	}{
		{"Anne-Marie", []string{"annemarie", "anne-marie", "anne"}, nil},
		{"John Michael", []string{"john", "johnmichael", "john-michael"}, nil},
		{"Dr. Jane", []string{"jane"}, nil},
		{"van der Berg", nil, []string{"vanderberg", "berg", "van-der-berg"}},
		{"Ó Briain", nil, []string{"obriain", "briain", "o-briain"}},
		{"Smith-Jones", nil, []string{"smithjones", "smith-jones", "smith"}},
		{"García Márquez", nil, []string{"garcia", "garciamarquez", "garcia-marquez"}},
		{"Smith Jr.", nil, []string{"smith"}},
		{"King III", nil, []string{"king"}},
		{"de", nil, []string{"de"}},
	} {
		if c.first != nil {
			if got := strs(firstForms(NormalizeName(c.in))); !slices.Equal(got, c.first) {
				t.Errorf("firstForms(%q) = %v, want %v", c.in, got, c.first)
			}
		}
		if c.last != nil {
			if got := strs(lastForms(NormalizeName(c.in))); !slices.Equal(got, c.last) {
				t.Errorf("lastForms(%q) = %v, want %v", c.in, got, c.last)
			}
		}
	}
}

func strs(fs []form) []string {
	var out []string
	for _, f := range fs {
		out = append(out, f.s)
	}
	return out
}

func TestCandidates(t *testing.T) {
	got := Candidates("John", "Smith", "")
	want := []string{"john.smith", "jsmith", "john", "johnsmith", "j.smith", "johns", "john_smith", "smith.john",
		"smithj", "john-smith", "smith", "smithjohn"}
	if !slices.Equal(got, want) {
		t.Errorf("Candidates(John, Smith) = %v\nwant %v", got, want)
	}
	if got := Candidates("John", "Smith", "{f}{last}"); !slices.Equal(got, []string{"jsmith"}) {
		t.Errorf("learned: %v", got)
	}
	if got := Candidates("John", "Smith", "{nonsense}"); !slices.Equal(got, want) {
		t.Errorf("an unknown learned pattern is ignored: %v", got)
	}
	// Compound names: the learned pattern over the forms of the name.
	if got := Candidates("Anne-Marie", "O'Neil", "{first}.{last}"); !slices.Equal(got, []string{"annemarie.oneil", "anne-marie.oneil", "anne.oneil"}) {
		t.Errorf("compound learned: %v", got)
	}
	if got := Candidates("Jan", "van der Berg", "{first}.{last}"); !slices.Equal(got, []string{"jan.vanderberg", "jan.berg", "jan.van-der-berg"}) {
		t.Errorf("particles learned: %v", got)
	}
	// German digraphs come after the stripped spelling, for both names
	// together (a company writes one style).
	got = Candidates("Jürgen", "Müller", "{first}.{last}")
	if !slices.Equal(got, []string{"jurgen.muller", "juergen.mueller"}) {
		t.Errorf("umlauts learned: %v", got)
	}
	// The top candidates of a unicode name.
	if got := Candidates("José", "Ñúñez", ""); got[0] != "jose.nunez" || got[1] != "jnunez" {
		t.Errorf("unicode: %v", got)
	}
	for _, bad := range [][2]string{{"", "Smith"}, {"John", ""}, {"李", "王"}, {"  ", "--"}, {"'", "Smith"}} {
		if got := Candidates(bad[0], bad[1], ""); got != nil {
			t.Errorf("Candidates(%q, %q) = %v, want nil", bad[0], bad[1], got)
		}
	}
	// Long names never give local parts over 64 octets.
	long := strings.Repeat("a", 60)
	for _, c := range Candidates(long, long, "") {
		if len(c) > 64 {
			t.Errorf("%d octets: %s", len(c), c)
		}
	}
}

func TestPatternsOf(t *testing.T) {
	n := parseName("John", "Smith")
	if got := patternsOf(n, "jsmith"); !slices.Equal(got, []string{"{f}{last}"}) {
		t.Errorf("jsmith: %v", got)
	}
	// An initial as first name: {first} and {f} write the same.
	n = parseName("J.", "Smith")
	if got := patternsOf(n, "jsmith"); len(got) < 2 {
		t.Errorf("ambiguous jsmith: %v", got)
	}
}

func TestPriorsAreTheDocumentedOrder(t *testing.T) {
	ps := Patterns()
	if len(ps) < 11 || ps[0] != "{first}.{last}" || ps[1] != "{f}{last}" || ps[10] != "{last}" {
		t.Errorf("priors: %v", ps)
	}
	for i := 1; i < len(priors); i++ {
		if priors[i].weight > priors[i-1].weight {
			t.Errorf("prior %s weighs more than %s", priors[i].pattern, priors[i-1].pattern)
		}
	}
}
