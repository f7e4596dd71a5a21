package processor

import (
	"errors"
	"fmt"
	"testing"

	"github.com/bulkd/bulkd/api/v1alpha1"
	"github.com/bulkd/bulkd/internal/jobs"
)

func TestExitCode(t *testing.T) {
	if ExitCode(nil) != 0 || ExitCode(fmt.Errorf("x: %w", jobs.ErrJobNotFound)) != v1alpha1.ProcessorExitJobDataMissing ||
		ExitCode(errors.New("redis down")) != v1alpha1.ProcessorExitRetry {
		t.Fatal("exit codes")
	}
}
