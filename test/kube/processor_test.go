package kube_test

import (
	"errors"
	"os"
	"os/exec"
	"testing"

	"github.com/google/uuid"

	"github.com/bulkd/bulkd/api/v1alpha1"
)

// `bulkd processor` exit codes, which the Job's podFailurePolicy reads.
func TestProcessorExitCodes(t *testing.T) {
	for _, c := range []struct {
		name  string
		args  []string
		redis string
		want  int
	}{
		{"job data gone: the index fails at once", []string{"--job", uuid.NewString(), "--shard", "0"}, h.redisURL, v1alpha1.ProcessorExitJobDataMissing},
		{"Redis unreachable: retried", []string{"--job", uuid.NewString(), "--shard", "0"}, "redis://127.0.0.1:1/0", v1alpha1.ProcessorExitRetry},
		{"no shard", []string{"--job", uuid.NewString()}, h.redisURL, 2},
		{"an unresolved index", []string{"--job", uuid.NewString(), "--shard", "$(JOB_COMPLETION_INDEX)"}, h.redisURL, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			cmd := exec.Command(h.bin, append([]string{"processor"}, c.args...)...)
			cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "BULKD_REDIS_URL=" + c.redis, "BULKD_LOG_FORMAT=text"}
			out, err := cmd.CombinedOutput()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != c.want {
				t.Fatalf("exit %v, want %d:\n%s", err, c.want, out)
			}
		})
	}
}
