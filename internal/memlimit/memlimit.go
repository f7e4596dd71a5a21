// Package memlimit gives the Go runtime a soft memory limit below the
// container's (cgroup) memory limit, so that a heap holding a large cache
// collects garbage before the kernel's OOM killer acts: without a limit the
// runtime lets the heap grow to about twice what is live.
package memlimit

import (
	"fmt"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
)

// Fraction of the cgroup limit given to the Go runtime; the rest is for
// what the runtime does not count (thread stacks outside the heap, the
// kernel's socket buffers charged to the cgroup, page cache).
const Fraction = 0.9

// cgroupFiles are where the memory limit lives: cgroup v2, then v1.
var cgroupFiles = []string{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}

// Apply sets the runtime's memory limit to Fraction of the cgroup limit
// unless GOMEMLIMIT is set (an operator's choice wins) or there is no
// limit. It says what it did, for the start-up log; "" when nothing.
func Apply() string {
	if os.Getenv("GOMEMLIMIT") != "" {
		return ""
	}
	for _, f := range cgroupFiles {
		raw, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		limit, ok := parse(string(raw))
		if !ok {
			return ""
		}
		soft := int64(float64(limit) * Fraction)
		debug.SetMemoryLimit(soft)
		return fmt.Sprintf("Go memory limit %d MiB (%.0f%% of the cgroup's %d MiB)", soft>>20, Fraction*100, limit>>20)
	}
	return ""
}

// parse reads a cgroup memory limit: a byte count, or "max" (v2) or a
// huge number (v1) for none.
func parse(s string) (int64, bool) {
	s = strings.TrimSpace(s)
	if s == "max" || s == "" {
		return 0, false
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 || n >= 1<<60 {
		return 0, false
	}
	return n, true
}
