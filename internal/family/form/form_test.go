package form_test

import (
	"encoding/json"
	"maps"
	"testing"

	"github.com/bulkd/bulkd/internal/family/form"
)

func TestNorm(t *testing.T) {
	for in, want := range map[string]string{"First Name": "firstname", "first_name": "firstname", "E-Mail": "email", " Téléphone ": "téléphone"} {
		if got := form.Norm(in); got != want {
			t.Errorf("Norm(%q) = %q, want %q", in, got, want)
		}
	}
}

// A header is mapped by the form's aliases, best alias first: the same
// columns for the dashboard and bulkctl, which both read these.
func TestGuessHeader(t *testing.T) {
	for _, c := range []struct {
		name string
		f    form.Form
		head []string
		want map[string]int
	}{
		{"lookup, names of both former tables", form.Lookup, []string{"FName", "Surname", "Company Domain"},
			map[string]int{"first_name": 0, "last_name": 1, "domain": 2}},
		{"lookup, the better alias wins over the earlier column", form.Lookup, []string{"url", "first", "last", "domain"},
			map[string]int{"first_name": 1, "last_name": 2, "domain": 3}},
		{"company", form.Company, []string{"Name", "LinkedIn", "Website"}, map[string]int{"network_url": 1, "domain": 2}},
		{"verification", form.Verification, []string{"id", "Work Email"}, map[string]int{"email": 1}},
		{"no header", form.Verification, []string{"a@b.example"}, map[string]int{}},
	} {
		if got := c.f.GuessHeader(c.head); !maps.Equal(got, c.want) {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

func TestGuessValues(t *testing.T) {
	for _, c := range []struct {
		name string
		f    form.Form
		row  []string
		want map[string]int
	}{
		{"company: the value decides", form.Company, []string{"Acme", "https://www.linkedin.com/company/acme", "acme.example"},
			map[string]int{"network_url": 1, "domain": 2}},
		{"company: nothing looks like either, the default", form.Company, []string{"Acme"}, map[string]int{"domain": 0}},
		{"verification", form.Verification, []string{"Ada", "ada@example.com"}, map[string]int{"email": 1}},
		{"lookup: by position", form.Lookup, []string{"Ada", "Lovelace", "example.com"}, map[string]int{"first_name": 0, "last_name": 1, "domain": 2}},
	} {
		if got := c.f.GuessValues(c.row); !maps.Equal(got, c.want) {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

func TestBody(t *testing.T) {
	items := []json.RawMessage{form.Company.Item([]string{"", "acme.example"}, nil),
		form.Lookup.Item([]string{"Ada", "", "x.example"}, func(string) bool { return true })}
	if got, want := string(form.Company.Body(items)), `{"input":[{"domain":"acme.example"},{"first_name":"Ada","last_name":"","domain":"x.example"}]}`; got != want {
		t.Errorf("body %s, want %s", got, want)
	}
	if got, want := string(form.Verification.Body([]json.RawMessage{form.Verification.Item([]string{"a@b.example"}, nil)})), `{"emails":["a@b.example"]}`; got != want {
		t.Errorf("body %s, want %s", got, want)
	}
}

// The built-in forms' bulk endpoints: each form has one, under /v1/, and
// no two share a name (bulkctl's handles) or a path (the API's routes).
func TestBuiltinMounts(t *testing.T) {
	names, paths := map[string]bool{}, map[string]bool{}
	for _, fm := range form.Builtin {
		if len(fm.Bulk) == 0 || fm.MaxRows <= 0 || fm.TotalField == "" || fm.Final == "" {
			t.Errorf("%s: mounts %v, max rows %d, total field %q, final %q", fm.Label, fm.Bulk, fm.MaxRows, fm.TotalField, fm.Final)
		}
		for _, m := range fm.Bulk {
			if len(m.Path) <= len("/v1/") || m.Path[:len("/v1/")] != "/v1/" || names[m.Name] || paths[m.Path] || m.Name == "" {
				t.Errorf("%s: mount %+v", fm.Label, m)
			}
			names[m.Name], paths[m.Path] = true, true
		}
	}
}
