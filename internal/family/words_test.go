package family_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/bulkd/bulkd/internal/family"
	"github.com/bulkd/bulkd/internal/lookup"
	"github.com/bulkd/bulkd/internal/verification"
)

// shared are the packages every family goes through (relative to the
// repository): they know families only through the contract, so their
// strings and templates hold no family's words.
var shared = []string{"apiserver", "internal/jobs", "internal/webhook", "internal/dashboard", "internal/dashboard/templates", "internal/family", "internal/billing"}

// familyWords are words of a shipped family: its inputs and answers
// (addresses, companies, lookups, verdicts) and its quotas' names.
var familyWords = regexp.MustCompile(`(?i)\blook ?ups?\b|single-lookup|bulk search|e-?mail address|verif|compan|enrich|deliverable|catch-all|result is unknown`)

// allowed are literals that match familyWords without being a family's:
// the plan's quotas as SPEC sections 7 and 8 name them for the account
// (GET /v1/account's fields, the ledger units, the dashboard's account
// overview and its choice of how to pay), not as one family's mount names
// them.
var allowed = []string{
	`json:"single_lookups_`, `json:"bulk_searches_`, `"single_lookups"`, `"bulk_searches"`,
	`"Unlimited plan (daily bulk search quota)"`,
	`>Bulk searches today<`, `aria-label="Daily bulk search quota used"`, `today's bulk search quota`,
	`bulk {{plural $j.QuotaUnits "search" "searches"}}`, `{{num $d.Quote.Distinct}} bulk searches`,
}

func isAllowed(s string) bool {
	for _, a := range allowed {
		if strings.Contains(s, a) {
			return true
		}
	}
	return false
}

// Ledger notes, quota names and dashboard sentences come from the
// family's declaration (issue 29, item 2): no string literal of a shared
// package's production code, and no line of the dashboard's templates,
// names a family's things.
func TestSharedPathsHoldNoFamilyWords(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, dir := range shared {
		files, err := os.ReadDir(filepath.Join(root, dir))
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range files {
			name, path := e.Name(), filepath.Join(root, dir, e.Name())
			switch {
			case strings.HasSuffix(name, ".html"):
				b, err := os.ReadFile(path)
				if err != nil {
					t.Fatal(err)
				}
				for i, line := range strings.Split(string(b), "\n") {
					if familyWords.MatchString(line) && !isAllowed(line) {
						t.Errorf("%s/%s:%d holds a family's words: %s", dir, name, i+1, strings.TrimSpace(line))
					}
				}
				checked++
			case strings.HasSuffix(name, ".go") && !strings.HasSuffix(name, "_test.go"):
				checked++
				checkGo(t, dir+"/"+name, path)
			}
		}
	}
	if checked < 40 {
		t.Fatalf("only %d files checked: wrong root %s?", checked, root)
	}
}

func checkGo(t *testing.T, rel, path string) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, path, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	ast.Inspect(f, func(n ast.Node) bool {
		lit, ok := n.(*ast.BasicLit)
		if !ok || lit.Kind != token.STRING || !familyWords.MatchString(lit.Value) || isAllowed(lit.Value) {
			return true
		}
		if s, err := strconv.Unquote(lit.Value); err == nil && isAllowed(s) {
			return true
		}
		t.Errorf("%s:%d holds a family's words: %s", rel, fset.Position(lit.Pos()).Line, lit.Value)
		return true
	})
}

// The words the shared paths no longer hold are the families' own.
func TestFamiliesDeclareTheirWords(t *testing.T) {
	ver := family.WordsOf(verification.New(nil, nil))
	if !strings.Contains(ver.RefundSentence, "unknown") {
		t.Errorf("verification's refund sentence %q", ver.RefundSentence)
	}
	for _, v := range []any{lookup.New(nil, nil), &lookup.Single{}} {
		if w := family.WordsOf(v); w.BulkQuota != "bulk search quota" || w.SingleQuota != "single-lookup cap" {
			t.Errorf("%T's quota words %+v", v, w)
		}
	}
	if w := family.WordsOf(struct{}{}); w != (family.Words{}) {
		t.Errorf("words of a family without them: %+v", w)
	}
}
