package apiserver_test

import (
	"flag"
	"fmt"
	"os"
	"testing"

	"github.com/bulkd/bulkd/internal/apicontract"
)

// TestMain runs the package's tests, each of whose exchanges is checked
// against openapi.yaml as it happens (internal/apicontract, through
// newTestAPI and bulkdtest), and then holds the document to what the tests
// saw: every (operation, status) pair it documents must have been answered
// by some test here, or it is a promise nobody checked (issue 26: 39 such
// pairs). A run narrowed with -run, or -short, cannot see every pair and
// skips that check.
func TestMain(m *testing.M) {
	flag.Parse()
	code := m.Run()
	if testing.Short() || flag.Lookup("test.run").Value.String() != "" || flag.Lookup("test.skip").Value.String() != "" {
		os.Exit(code)
	}
	c, err := apicontract.Default()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	if missing := c.Unproduced(); len(missing) > 0 {
		fmt.Fprintf(os.Stderr, "FAIL: %d (operation, status) pairs of openapi.yaml were answered by no test of this package; "+
			"produce each in a test or take it out of the document:\n", len(missing))
		for _, p := range missing {
			fmt.Fprintln(os.Stderr, "\t"+p.String())
		}
		code = 1
	}
	os.Exit(code)
}
