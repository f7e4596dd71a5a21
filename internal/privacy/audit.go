package privacy

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// AuditKey is the audit log: a stream of erasures and job deletions, who
// asked, what was removed, when. It holds keyed hashes and counts, never
// an address or a name, and entries older than the configured period
// (--privacy-audit-retention) are trimmed as new ones are added.
const AuditKey = "bulkd:privacy:audit"

// Audit writes and reads the audit log.
type Audit struct {
	rdb redis.UniversalClient
	// Keep is how long an entry is kept (0: DefaultAuditKeep).
	Keep time.Duration
	Now  func() time.Time
}

// DefaultAuditKeep is how long audit entries are kept unless configured:
// three years, the usual limitation period for a claim about an erasure.
const DefaultAuditKeep = 3 * 365 * 24 * time.Hour

// NewAudit returns the audit log on rdb.
func NewAudit(rdb redis.UniversalClient, keep time.Duration) *Audit {
	if keep <= 0 {
		keep = DefaultAuditKeep
	}
	return &Audit{rdb: rdb, Keep: keep, Now: time.Now}
}

// Entry is one audit record.
type Entry struct {
	ID     string `json:"id"`
	At     int64  `json:"at_ms"`
	Actor  string `json:"actor"`  // who asked: "admin:<os user>", "key:bkd_<id>"
	Action string `json:"action"` // "erase", "delete_job", "expire_job"
	// Subject is the keyed hash of the erased subject (erase only).
	Subject string `json:"subject,omitempty"`
	Job     string `json:"job,omitempty"`
	Account string `json:"account,omitempty"`
	// Counts of what was removed: jobs, rows, inputs, answers, patterns.
	Counts map[string]int64 `json:"counts,omitempty"`
}

// Record appends e (its ID and At are set here) and trims entries older
// than Keep.
func (a *Audit) Record(ctx context.Context, e Entry) error {
	now := a.Now()
	vals := map[string]any{"at": now.UnixMilli(), "actor": e.Actor, "action": e.Action}
	if e.Subject != "" {
		vals["subject"] = e.Subject
	}
	if e.Job != "" {
		vals["job"] = e.Job
	}
	if e.Account != "" {
		vals["account"] = e.Account
	}
	for k, v := range e.Counts {
		vals["n:"+k] = v
	}
	minID := strconv.FormatInt(now.Add(-a.Keep).UnixMilli(), 10) + "-0"
	err := a.rdb.XAdd(ctx, &redis.XAddArgs{Stream: AuditKey, MinID: minID, Approx: true, Values: vals}).Err()
	if err != nil {
		return fmt.Errorf("audit log: %w", err)
	}
	return nil
}

// Entries reads up to n entries, oldest first.
func (a *Audit) Entries(ctx context.Context, n int64) ([]Entry, error) {
	msgs, err := a.rdb.XRangeN(ctx, AuditKey, "-", "+", n).Result()
	if err != nil {
		return nil, fmt.Errorf("audit log: %w", err)
	}
	out := make([]Entry, 0, len(msgs))
	for _, m := range msgs {
		e := Entry{ID: m.ID, Counts: map[string]int64{}}
		for k, v := range m.Values {
			s, _ := v.(string)
			switch k {
			case "at":
				e.At, _ = strconv.ParseInt(s, 10, 64)
			case "actor":
				e.Actor = s
			case "action":
				e.Action = s
			case "subject":
				e.Subject = s
			case "job":
				e.Job = s
			case "account":
				e.Account = s
			default:
				if len(k) > 2 && k[:2] == "n:" {
					e.Counts[k[2:]], _ = strconv.ParseInt(s, 10, 64)
				}
			}
		}
		out = append(out, e)
	}
	return out, nil
}
