package serve

import (
	"flag"
	"log/slog"
	"testing"
	"time"

	"github.com/bulkd/bulkd/internal/config"
	"github.com/bulkd/bulkd/internal/testredis"
)

// --smtp-session-idle reaches both verifiers: the default parks sessions
// for 2 s, a value is taken as given, and 0 turns parking off (the
// verifier's negative), never its 2 s default.
func TestSMTPSessionIdleFlag(t *testing.T) {
	rdb, _ := testredis.Client(t)
	for _, tc := range []struct {
		args []string
		want time.Duration
	}{
		{nil, 2 * time.Second},
		{[]string{"--smtp-session-idle", "750ms"}, 750 * time.Millisecond},
		{[]string{"--smtp-session-idle", "0"}, -1},
	} {
		cfg := config.Default()
		fs := flag.NewFlagSet("serve", flag.ContinueOnError)
		cfg.Register(fs)
		if err := fs.Parse(tc.args); err != nil {
			t.Fatal(err)
		}
		cfg.VerifySingleRetry = time.Second // the single check gets its own verifier
		if err := cfg.Validate(); err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		vs, err := (&parts{cfg: cfg, rdb: rdb, log: slog.Default(), out: &families{}}).verifiers()
		if err != nil {
			t.Fatal(err)
		}
		if got := vs.bulk.SessionIdle(); got != tc.want {
			t.Errorf("%v: bulk verifier parks for %v, want %v", tc.args, got, tc.want)
		}
		if vs.single == vs.bulk {
			t.Fatalf("%v: no separate single verifier", tc.args)
		}
		if got := vs.single.SessionIdle(); got != tc.want {
			t.Errorf("%v: single verifier parks for %v, want %v", tc.args, got, tc.want)
		}
	}
}
