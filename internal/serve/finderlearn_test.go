package serve

import (
	"log/slog"
	"testing"

	"github.com/bulkd/bulkd/internal/config"
	"github.com/bulkd/bulkd/internal/finder"
	"github.com/bulkd/bulkd/internal/testredis"
)

// --finder-learn-from-verification (default on) gives the verification
// family the finder's teacher on the shared pattern store; false gives it
// none.
func TestFinderLearnFromVerificationFlag(t *testing.T) {
	rdb, _ := testredis.Client(t)
	for _, on := range []bool{true, false} {
		cfg := config.Default()
		if !cfg.FinderLearnFromVerification {
			t.Fatal("the default is off")
		}
		cfg.FinderLearnFromVerification = on
		f, err := buildFamilies(cfg, rdb, slog.Default(), scope{}, nil)
		if err != nil {
			t.Fatal(err)
		}
		_, ok := f.verification.Teacher.(*finder.VerificationTeacher)
		if ok != on {
			t.Errorf("flag %v: teacher %T", on, f.verification.Teacher)
		}
	}
}
