package csvsniff

import "testing"

func TestComma(t *testing.T) {
	for first, want := range map[string]rune{
		"email":                       ',',
		"first_name,last_name,domain": ',',
		"Vorname;Nachname;Domain":     ';',
		"name\tdomain":                '\t',
		"Name;Company, Inc;Domain":    ';', // more semicolons than commas
		"a,b;c":                       ',', // a tie keeps the comma
		"a\tb;c":                      '\t',
		"":                            ',',
	} {
		if got := Comma(first); got != want {
			t.Errorf("Comma(%q) = %q, want %q", first, got, want)
		}
	}
}
