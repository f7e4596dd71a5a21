package bulkctl

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

// Handle names what `submit` made: the family and its jobs in input order.
// Written as "<family>:<id>[,<id>...]", e.g.
// "verify:0b6f...,5e0c...,9a41..." for a list split into three jobs.
type Handle struct {
	Family *Family
	Jobs   []string
	// first is the first job's status when ResolveArg read it to find the
	// family (Status and Wait then need not ask again).
	first *JobStatus
}

func (h Handle) String() string {
	return h.Family.Kind + ":" + strings.Join(h.Jobs, ",")
}

var uuidRE = regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)

// ParseHandle reads a handle, or job ids without a family ("ID[,ID...]":
// Family nil, to be found with Resolve). A path to a manifest file is read
// by ResolveArg instead.
func ParseHandle(s string) (Handle, error) {
	s = strings.TrimSpace(s)
	var h Handle
	if kind, rest, ok := strings.Cut(s, ":"); ok {
		f, err := FamilyByKind(kind)
		if err != nil {
			return h, &UsageError{fmt.Errorf("job handle %q: %w", s, err)}
		}
		h.Family, s = f, rest
	}
	for _, id := range strings.Split(s, ",") {
		id = strings.TrimSpace(id)
		if !uuidRE.MatchString(id) {
			return h, usagef("job handle: %q is not a job id (want FAMILY:ID[,ID...], a job id, or a manifest file)", id)
		}
		h.Jobs = append(h.Jobs, strings.ToLower(id))
	}
	return h, nil
}

// ResolveArg turns a JOB argument into a handle: a manifest file's jobs,
// a handle, or bare job ids whose family is found by asking the server
// (each family's status path knows only its own jobs). An answer may also
// tell the key's plan (404 Job not found from a family of its plan, 403
// wrong_key_plan from one of the other), and then the other plan's
// families are not asked.
func ResolveArg(ctx context.Context, c *Client, arg string) (Handle, error) {
	if st, err := os.Stat(arg); err == nil && st.Mode().IsRegular() {
		m, err := ReadManifest(arg)
		if err != nil {
			return Handle{}, err
		}
		return m.JobHandle()
	}
	h, err := ParseHandle(arg)
	if err != nil || h.Family != nil {
		return h, err
	}
	var (
		last      error
		unlimited *bool // the key's plan, once an answer told it
	)
	for _, f := range Families {
		if unlimited != nil && f.Unlimited != *unlimited {
			continue
		}
		s, err := GetStatus(ctx, c, f, h.Jobs[0])
		if err == nil {
			h.Family, h.first = f, s
			return h, nil
		}
		var ae *APIError
		if !errors.As(err, &ae) || (ae.Status != 404 && ae.Status != 403 && ae.Status != 402 && ae.Status != 400 && ae.Status != 422) {
			return h, err
		}
		last = err
		// The family's own 404 (not a path this server does not route) or
		// its refusal of the key's plan.
		if (ae.Status == 404 && ae.Detail == "Job not found") || ae.Code == "wrong_key_plan" {
			u := f.Unlimited != (ae.Code == "wrong_key_plan")
			unlimited = &u
		}
	}
	return h, fmt.Errorf("job %s not found under any family with this key: %w", h.Jobs[0], last)
}

// Manifest is the file `submit --manifest FILE` writes (and rewrites after
// every accepted job, so a submission cut short still names its jobs).
type Manifest struct {
	Version        int           `json:"bulkctl_manifest"`
	Family         string        `json:"family"`
	Handle         string        `json:"handle"`
	URL            string        `json:"url"`
	Input          string        `json:"input"`
	CreatedAt      time.Time     `json:"created_at"`
	IdempotencyKey string        `json:"idempotency_key"`
	RowsRead       int           `json:"rows_read"`
	RowsSubmitted  int           `json:"rows_submitted"`
	Duplicates     int           `json:"duplicates"`
	Skipped        int           `json:"skipped"`
	Parts          int           `json:"parts"`
	Complete       bool          `json:"complete"`
	Jobs           []ManifestJob `json:"jobs"`
}

// ManifestJob is one accepted submission.
type ManifestJob struct {
	JobID    string          `json:"job_id"`
	Part     int             `json:"part"`      // 1-based
	FirstRow int             `json:"first_row"` // 0-based index of its first row among the submitted rows
	Rows     int             `json:"rows"`
	Response json.RawMessage `json:"response"` // the submission answer as the server gave it
}

// JobHandle is the manifest's handle.
func (m *Manifest) JobHandle() (Handle, error) {
	f, err := FamilyByKind(m.Family)
	if err != nil {
		return Handle{}, &UsageError{err}
	}
	h := Handle{Family: f}
	for _, j := range m.Jobs {
		h.Jobs = append(h.Jobs, j.JobID)
	}
	if len(h.Jobs) == 0 {
		return h, usagef("manifest has no jobs")
	}
	return h, nil
}

// ReadManifest reads a manifest file.
func ReadManifest(path string) (*Manifest, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, &UsageError{err}
	}
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil || m.Version == 0 {
		return nil, usagef("%s is not a bulkctl manifest", path)
	}
	return &m, nil
}

// Write writes the manifest atomically (a temporary file renamed).
func (m *Manifest) Write(path string) error {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".bulkctl-manifest-*")
	if err != nil {
		return err
	}
	if _, err := tmp.Write(append(b, '\n')); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return err
	}
	if err := tmp.Close(); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	return os.Rename(tmp.Name(), path)
}
