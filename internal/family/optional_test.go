package family_test

import (
	"testing"
	"time"

	"github.com/bulkd/bulkd/internal/family"
	"github.com/bulkd/bulkd/internal/jobs"
)

// The one provisional-retry rule: a temporary answer is retried after its
// attempt's delay while retries are left; after the last it is final, and
// an answer that is not temporary is final at once.
func TestRetrySchedule(t *testing.T) {
	now := time.Date(2026, 11, 27, 3, 0, 0, 0, time.UTC)
	s := family.RetrySchedule{Delays: []time.Duration{time.Minute, 5 * time.Minute}, Now: func() time.Time { return now }}
	temporary := []bool{true, true, true, false}
	var seen []family.Attempt
	got, err := s.Answers(4, []int{1, 2, 3, 1}, func(i int) bool { return temporary[i] }, func(i int, a family.Attempt) (jobs.Answer, error) {
		seen = append(seen, a)
		return jobs.Answer{Outcome: "x"}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []time.Time{now.Add(time.Minute), now.Add(5 * time.Minute), {}, {}}
	for i, w := range want {
		if !got[i].RetryAt.Equal(w) || seen[i].Provisional() != !w.IsZero() {
			t.Errorf("input %d: retry at %v (provisional %v), want %v", i, got[i].RetryAt, seen[i].Provisional(), w)
		}
	}
	// First answers (attempts nil) are attempt 1.
	got, _ = s.Answers(1, nil, func(int) bool { return true }, func(i int, a family.Attempt) (jobs.Answer, error) {
		if a.N != 1 {
			t.Errorf("attempt %d", a.N)
		}
		return jobs.Answer{}, nil
	})
	if !got[0].RetryAt.Equal(now.Add(time.Minute)) {
		t.Errorf("first answer retry at %v", got[0].RetryAt)
	}
}
