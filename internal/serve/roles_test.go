package serve

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/bulkd/bulkd/internal/accounts/accountstest"
	"github.com/bulkd/bulkd/internal/config"
	"github.com/bulkd/bulkd/internal/credits"
	"github.com/bulkd/bulkd/internal/enrich"
	"github.com/bulkd/bulkd/internal/jobs"
	"github.com/bulkd/bulkd/internal/lookup"
	"github.com/bulkd/bulkd/internal/testredis"
	"github.com/bulkd/bulkd/internal/verification"
)

// Each process builds what its role needs (issue 29, item 3): a company
// enrichment processor builds no SMTP verifier, loads no address lists and
// starts no HELO check; an email processor does; the controller declares
// every family (names, error outcomes) and builds no verifier; only a
// process that builds a verifier warns about --smtp-deny-private.
func TestEachRoleBuildsWhatItNeeds(t *testing.T) {
	rdb, _ := testredis.Client(t)
	cfg := config.Default()
	cfg.SMTPDenyPrivate = true
	for _, tc := range []struct {
		name     string
		sc       scope
		families []string
		smtp     bool
		singles  int
	}{
		{"serve", scope{}, []string{enrich.Family, verification.Name, lookup.Name}, true, 4},
		{"company pod", scope{only: enrich.Family}, []string{enrich.Family}, false, 1},
		{"verification pod", scope{only: verification.Name}, []string{verification.Name}, true, 1},
		{"lookup pod", scope{only: lookup.Name}, []string{lookup.Name}, true, 2},
		{"controller", scope{declared: true}, []string{enrich.Family, verification.Name, lookup.Name}, false, 0},
	} {
		var logs bytes.Buffer
		log := slog.New(slog.NewTextHandler(&logs, nil))
		f, err := buildFamilies(cfg, rdb, log, tc.sc, nil)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if got := f.registry.Names(); strings.Join(got, ",") != strings.Join(tc.families, ",") {
			t.Errorf("%s: families %v, want %v", tc.name, got, tc.families)
		}
		if built := f.helo != nil || f.lists != nil; built != tc.smtp {
			t.Errorf("%s: SMTP verifier, lists and HELO check built: %v, want %v", tc.name, built, tc.smtp)
		}
		if warned := strings.Contains(logs.String(), "--smtp-deny-private"); warned != tc.smtp {
			t.Errorf("%s: --smtp-deny-private warning logged: %v, want %v", tc.name, warned, tc.smtp)
		}
		if len(f.singles) != tc.singles {
			t.Errorf("%s: %d single mounts, want %d", tc.name, len(f.singles), tc.singles)
		}
		for _, name := range tc.families {
			if _, ok := f.registry.ErrorOutcome(name); !ok {
				t.Errorf("%s: no error outcome for %s", tc.name, name)
			}
		}
	}
}

// A processor pod builds its job's family alone; a job that is gone is
// ErrJobNotFound (the pod exits 3).
func TestJobProcessorBuildsTheJobsFamily(t *testing.T) {
	rdb, _ := testredis.Client(t)
	ctx := context.Background()
	if _, err := NewJobProcessor(ctx, config.Default(), rdb, slog.Default(), "00000000-0000-4000-8000-000000000000"); err != jobs.ErrJobNotFound {
		t.Fatalf("missing job: %v, want ErrJobNotFound", err)
	}
	c, err := BuildWith(config.Default(), rdb, quietLog(), Options{Executor: idleExecutor{}})
	if err != nil {
		t.Fatal(err)
	}
	p := accountstest.PayAsYouGo(t, rdb, nil, "roles", credits.Whole(100))
	b := jobs.NewBuilder(enrich.Family, 2)
	b.AddValid("a", "a", "a")
	j, err := c.Engine.Submit(ctx, p, b, jobs.Metering{Price: 1})
	if err != nil {
		t.Fatal(err)
	}
	proc, err := NewJobProcessor(ctx, config.Default(), rdb, quietLog(), j.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got := proc.KnownFamilies(); len(got) != 1 || got[0] != enrich.Family {
		t.Errorf("processor of a company job knows %v", got)
	}
	// A job of a family this build does not know: refused before anything
	// is built, naming the family (the pod exits 1, test/kube).
	if err := rdb.HSet(ctx, "bulkd:job:{"+j.ID+"}", "family", "phone_lookup").Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := NewJobProcessor(ctx, config.Default(), rdb, quietLog(), j.ID); !errors.Is(err, jobs.ErrUnknownFamily) ||
		!strings.Contains(err.Error(), `unknown job family "phone_lookup"`) {
		t.Errorf("job of an unknown family: %v", err)
	}
}
