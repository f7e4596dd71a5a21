package chart

import (
	"strings"
	"testing"
)

// TestChartAccountLimits: the per-account limits' defaults reach every
// component through the ConfigMap as the flags' variables (integers
// written whole, not in float notation), a value set changes them, and a
// negative one is refused at render time.
func TestChartAccountLimits(t *testing.T) {
	want := map[string]string{
		"BULKD_ACCOUNT_MAX_ACTIVE_JOBS": "50", "BULKD_ACCOUNT_MAX_STORED_BYTES": "1073741824",
		"BULKD_ACCOUNT_MAX_DRAFTS": "10", "BULKD_ACCOUNT_MAX_DRAFT_BYTES": "33554432",
		"BULKD_ACCOUNT_MAX_KEYS": "20", "BULKD_ACCOUNT_RATE_LIMIT": "100",
	}
	r, err := render(t, "bulkd", "default", map[string]any{})
	if err != nil {
		t.Fatal(err)
	}
	cm := r.get(t, "ConfigMap", "bulkd-config")
	for k, v := range want {
		if got := nestedString(t, cm, "data", k); got != v {
			t.Errorf("ConfigMap %s = %q, want %q", k, got, v)
		}
	}
	r, err = render(t, "bulkd", "default", parseValues(t, "accountLimits: {activeJobs: 5, storedBytes: 10737418240, requestRate: 0}"))
	if err != nil {
		t.Fatal(err)
	}
	cm = r.get(t, "ConfigMap", "bulkd-config")
	for k, v := range map[string]string{"BULKD_ACCOUNT_MAX_ACTIVE_JOBS": "5", "BULKD_ACCOUNT_MAX_STORED_BYTES": "10737418240", "BULKD_ACCOUNT_RATE_LIMIT": "0"} {
		if got := nestedString(t, cm, "data", k); got != v {
			t.Errorf("ConfigMap %s = %q, want %q", k, got, v)
		}
	}
	if _, err := render(t, "bulkd", "default", parseValues(t, "accountLimits: {keys: -1}")); err == nil || !strings.Contains(err.Error(), "keys") {
		t.Errorf("a negative limit: %v", err)
	}
}
