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
		"BULKD_ACCOUNT_MAX_IDEMPOTENCY_BYTES": "268435456",
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
	r, err = render(t, "bulkd", "default", parseValues(t, "accountLimits: {activeJobs: 5, storedBytes: 10737418240, requestRate: 0, idempotencyBytes: 0}"))
	if err != nil {
		t.Fatal(err)
	}
	cm = r.get(t, "ConfigMap", "bulkd-config")
	for k, v := range map[string]string{"BULKD_ACCOUNT_MAX_ACTIVE_JOBS": "5", "BULKD_ACCOUNT_MAX_STORED_BYTES": "10737418240", "BULKD_ACCOUNT_RATE_LIMIT": "0", "BULKD_ACCOUNT_MAX_IDEMPOTENCY_BYTES": "0"} {
		if got := nestedString(t, cm, "data", k); got != v {
			t.Errorf("ConfigMap %s = %q, want %q", k, got, v)
		}
	}
	if _, err := render(t, "bulkd", "default", parseValues(t, "accountLimits: {keys: -1}")); err == nil || !strings.Contains(err.Error(), "keys") {
		t.Errorf("a negative limit: %v", err)
	}
}

// TestChartSignInIPv6Prefix: --signin-ipv6-prefix reaches the API pod
// (where the dashboard signs users in) as BULKD_SIGNIN_IPV6_PREFIX, 64 by
// default as the flag's; a set value changes it; outside 32..128 the
// schema refuses it at render time, as the flag would at start.
func TestChartSignInIPv6Prefix(t *testing.T) {
	for _, tc := range []struct{ values, want string }{{"{}", "64"}, {"signInIPv6Prefix: 56", "56"}, {"signInIPv6Prefix: 128", "128"}} {
		r, err := render(t, "bulkd", "default", parseValues(t, tc.values))
		if err != nil {
			t.Fatal(err)
		}
		env := envOf(containers(t, r.get(t, "Deployment", "bulkd-apiserver"))[0])
		if got := env["BULKD_SIGNIN_IPV6_PREFIX"]["value"]; got != tc.want {
			t.Errorf("%s: BULKD_SIGNIN_IPV6_PREFIX = %v, want %s", tc.values, got, tc.want)
		}
	}
	for _, bad := range []string{"signInIPv6Prefix: 24", "signInIPv6Prefix: 129", "signInIPv6Prefix: \"64\""} {
		if _, err := render(t, "bulkd", "default", parseValues(t, bad)); err == nil || !strings.Contains(err.Error(), "signInIPv6Prefix") {
			t.Errorf("render with %s: %v, want an error naming signInIPv6Prefix", bad, err)
		}
	}
}
