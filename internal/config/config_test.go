package config

import (
	"flag"
	"os"
	"regexp"
	"testing"
)

// README's configuration table lists every flag of `bulkd serve` with its
// environment variable; this keeps the two from drifting apart.
func TestREADMEListsEveryFlag(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	rows := map[string]string{}
	for _, m := range regexp.MustCompile("(?m)^\\| `--([a-z-]+)` \\| `([A-Z_]+)` \\|").FindAllStringSubmatch(string(readme), -1) {
		rows[m[1]] = m[2]
	}
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	c := Default()
	c.Register(fs)
	fs.VisitAll(func(f *flag.Flag) {
		env, ok := rows[f.Name]
		switch {
		case !ok:
			t.Errorf("README's configuration table lacks --%s", f.Name)
		case env != EnvName(f.Name):
			t.Errorf("README names --%s's variable %s, not %s", f.Name, env, EnvName(f.Name))
		}
	})
}
