package privacy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bulkd/bulkd/internal/family"
	"github.com/bulkd/bulkd/internal/finder"
	"github.com/bulkd/bulkd/internal/jobs"
)

// Subject is whom an erasure is for: an email address, or a person at a
// domain (email lookup's input). Either or both.
type Subject struct {
	Email               string
	First, Last, Domain string
}

// subjects are s's canonical subjects.
func (s Subject) subjects() []string {
	var out []string
	if s.Email != "" {
		out = append(out, family.EmailSubject(s.Email))
	}
	if s.First != "" || s.Last != "" {
		out = append(out, family.PersonSubject(s.First, s.Last, s.Domain))
	}
	return out
}

// Valid reports whether s names someone: an address with an @, or a first
// and last name with a domain.
func (s Subject) Valid() error {
	if s.Email == "" && s.First == "" && s.Last == "" {
		return errors.New("nobody to erase: give --email ADDRESS or --name FIRST LAST --domain D")
	}
	if s.Email != "" && !strings.Contains(s.Email, "@") {
		return errors.New("--email: not an address")
	}
	if (s.First != "" || s.Last != "") && (s.First == "" || s.Last == "" || s.Domain == "") {
		return errors.New("--name needs a first and a last name, and --domain")
	}
	return nil
}

// Report is what an erasure did; it names no one (the subject only as its
// keyed hash).
type Report struct {
	Subjects []string `json:"subjects"` // keyed hashes
	Jobs     int64    `json:"jobs_searched"`
	Touched  int64    `json:"jobs_changed"`
	Inputs   int64    `json:"inputs_erased"`
	Rows     int64    `json:"rows_erased"`
	Patterns int64    `json:"patterns_forgotten"`
	Millis   int64    `json:"duration_ms"`
}

// Eraser removes a person from everything bulkd holds.
type Eraser struct {
	Redis    redis.UniversalClient
	Store    *jobs.Store
	Families map[string]family.Family // by name: the families whose jobs are searched
	Suppress *Suppressions
	Hasher   *Hasher
	Audit    *Audit
	Patterns *finder.RedisPatterns
	Log      *slog.Logger
}

// Erase removes sub from every job of every account, forgets what was
// learned from their address, puts them on the suppression list and
// records the erasure in the audit log (actor: who asked). In that order
// the suppression list is written last but one: an erasure that fails
// part-way is repeated whole (every step is idempotent), and a submission
// racing it is erased by that repetition or suppressed after it.
func (e *Eraser) Erase(ctx context.Context, sub Subject, actor string) (*Report, error) {
	if err := sub.Valid(); err != nil {
		return nil, err
	}
	if e.Hasher == nil {
		return nil, ErrNoSecret
	}
	start := time.Now()
	subs := sub.subjects()
	rep := &Report{}
	for _, s := range subs {
		rep.Subjects = append(rep.Subjects, e.Hasher.Hash(s))
	}
	addr := strings.ToLower(strings.TrimSpace(sub.Email))
	learned, err := e.redactJobs(ctx, subs, addr, rep)
	if err != nil {
		return nil, err
	}
	if err := e.forget(ctx, sub, addr, learned, rep); err != nil {
		return nil, err
	}
	// The verifier's caches are per domain and per mail server (catch-all
	// verdicts, probe addresses made up by bulkd, politeness): none names
	// a person (docs/privacy.md).
	if err := e.Suppress.Add(ctx, subs...); err != nil {
		return nil, err
	}
	rep.Millis = time.Since(start).Milliseconds()
	for _, h := range rep.Subjects {
		if err := e.Audit.Record(ctx, Entry{Actor: actor, Action: "erase", Subject: h, Counts: map[string]int64{
			"jobs_searched": rep.Jobs, "jobs_changed": rep.Touched, "inputs": rep.Inputs, "rows": rep.Rows, "patterns": rep.Patterns}}); err != nil {
			return nil, err
		}
	}
	if e.Log != nil {
		e.Log.Info("person erased", "subject", rep.Subjects, "jobs", rep.Jobs, "changed", rep.Touched, "inputs", rep.Inputs,
			"rows", rep.Rows, "patterns", rep.Patterns, "ms", rep.Millis)
	}
	return rep, nil
}

// learned is what the erased inputs taught the finder: the lookups'
// found addresses (a pattern each), and whether a verification of the
// address was erased (its shape was counted).
type learned struct {
	forgets []jobs.Erased
	shapes  bool
}

// redactJobs erases the inputs naming one of subs (or whose answer holds
// addr) from every job of every account, counting into rep.
func (e *Eraser) redactJobs(ctx context.Context, subs []string, addr string, rep *Report) (learned, error) {
	want := map[string]bool{}
	for _, s := range subs {
		want[s] = true
	}
	var l learned
	accts, err := e.Redis.SMembers(ctx, "bulkd:accounts").Result()
	if err != nil {
		return l, fmt.Errorf("erase: accounts: %w", err)
	}
	err = e.Store.AllJobs(ctx, accts, func(j *jobs.Job) error {
		rep.Jobs++
		f, ok := e.Families[j.Family]
		fs, named := f.(family.Subjects)
		if !ok || !named {
			return nil // a family whose inputs name no one
		}
		hitInput := func(payload string) bool {
			for _, s := range fs.Subjects(payload) {
				if want[s] {
					return true
				}
			}
			return false
		}
		hitText := func(text string) bool { return addr != "" && strings.Contains(strings.ToLower(text), addr) }
		red, err := e.Store.Redact(ctx, j, hitInput, hitText, fs.SuppressedAnswer())
		if err != nil {
			return err
		}
		if red.Inputs > 0 || red.Rows > 0 {
			rep.Touched++
		}
		rep.Inputs += red.Inputs
		rep.Rows += red.Rows
		for _, x := range red.Erased {
			if addr != "" && strings.Contains(strings.ToLower(x.Payload), addr) {
				l.shapes = true // a verification of the address: its shape was counted
			}
			l.forgets = append(l.forgets, x)
		}
		return nil
	})
	if err != nil {
		return l, fmt.Errorf("erase: %w", err)
	}
	return l, nil
}

// forget takes back what the finder learned from the erased inputs: a
// pattern from a person's found address, a shape from a verified one.
func (e *Eraser) forget(ctx context.Context, sub Subject, addr string, l learned, rep *Report) error {
	if e.Patterns == nil {
		return nil
	}
	for _, x := range l.forgets {
		var p finder.Person
		var r finder.Result
		_, data, _ := strings.Cut(x.Answer, "\n")
		if json.Unmarshal([]byte(x.Payload), &p) != nil || json.Unmarshal([]byte(data), &r) != nil || r.Email == nil || p.FirstName == "" {
			continue
		}
		n, err := e.Patterns.Forget(ctx, p.FirstName, p.LastName, *r.Email)
		if err != nil {
			return err
		}
		rep.Patterns += int64(n)
	}
	if sub.First != "" && addr != "" {
		n, err := e.Patterns.Forget(ctx, sub.First, sub.Last, addr)
		if err != nil {
			return err
		}
		rep.Patterns += int64(n)
	}
	if l.shapes {
		n, err := e.Patterns.ForgetShape(ctx, addr)
		if err != nil {
			return err
		}
		rep.Patterns += int64(n)
	}
	return nil
}
