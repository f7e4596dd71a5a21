package bulkctl

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/google/uuid"
)

// SubmitOptions are the flags of `submit`.
type SubmitOptions struct {
	Input          string   // file name, "-" for stdin
	Format         string   // csv, jsonl or "" (guess)
	Columns        []string // --column
	Unlimited      bool     // lookup only: the unlimited-plan mount
	ChunkRows      int      // rows per job at most (0: the family's limit)
	Manifest       string   // file to write the manifest to
	IdempotencyKey string   // prefix of the parts' Idempotency-Keys ("" : a random one)
}

// SubmitResult is what a submission made.
type SubmitResult struct {
	Handle  Handle
	Credits float64
}

// Submit reads the input, splits it into jobs of at most the family's
// row limit and submits them in order, each with its own Idempotency-Key
// (PREFIX-<part>), so a retried part is never charged twice. On an error
// after some parts were accepted, the result names those parts.
func Submit(ctx context.Context, c *Client, f *Family, in io.Reader, o SubmitOptions, log func(string, ...any)) (*SubmitResult, error) {
	if o.Unlimited {
		u := unlimitedOf(f)
		if u == nil {
			return nil, usagef("--unlimited: %s has no unlimited-plan bulk endpoint", strings.ToLower(f.Form.Label))
		}
		f = u
	}
	p, err := Prepare(f, in, o.Input, o.Format, o.Columns)
	if err != nil {
		return nil, err
	}
	for _, w := range p.Warnings {
		log("warning: %s", w)
	}
	if len(p.Items) == 0 {
		return nil, &UsageError{errEmpty}
	}
	maxRows := f.Form.MaxRows
	if o.ChunkRows > 0 {
		maxRows = min(maxRows, o.ChunkRows)
	}
	parts := Chunks(p.Items, maxRows)
	prefix := o.IdempotencyKey
	if prefix == "" {
		prefix = "bulkctl-" + uuid.NewString()
	}
	// The server takes 1-255 printable ASCII characters; "-N" is added.
	if len(prefix) > 240 || strings.IndexFunc(prefix, func(r rune) bool { return r < ' ' || r > '~' }) >= 0 {
		return nil, usagef("--idempotency-key: at most 240 printable ASCII characters")
	}
	m := &Manifest{Version: 1, Family: f.Kind, URL: c.BaseURL, Input: o.Input, CreatedAt: time.Now().UTC().Truncate(time.Second),
		IdempotencyKey: prefix, RowsRead: p.Read, RowsSubmitted: len(p.Items), Duplicates: p.Duplicates,
		Skipped: p.Skipped, Parts: len(parts)}
	res := &SubmitResult{}
	log("%s: %d rows read from %s (columns %s), %d to submit (%d repeats, %d left out) in %d job(s)",
		f.Kind, p.Read, o.Input, strings.Join(p.Columns, ", "), len(p.Items), p.Duplicates, p.Skipped, len(parts))
	// A family with an unlimited-plan mount too: an unlimited-plan key
	// is noticed (403 wrong_key_plan) and its parts go there.
	alt := unlimitedOf(f)
	autoPlan := alt != nil && !f.Unlimited
	for i, part := range parts {
		b := body(f, p.Items[part[0]:part[1]])
		hdr := http.Header{"Idempotency-Key": {fmt.Sprintf("%s-%d", prefix, i+1)}}
		r, err := c.Do(ctx, http.MethodPost, f.Path, b, hdr)
		var ae *APIError
		if autoPlan && errors.As(err, &ae) && ae.Status == http.StatusForbidden && ae.Code == "wrong_key_plan" {
			// An unlimited-plan key: the family has its own mount for it.
			log("the key is an unlimited-plan key: using %s", alt.Path)
			f, m.Family, autoPlan = alt, alt.Kind, false
			r, err = c.Do(ctx, http.MethodPost, f.Path, b, hdr)
		}
		if err != nil {
			return res, &PartialSubmitError{Err: err, Accepted: i, Parts: len(parts), Prefix: prefix, Handle: res.Handle}
		}
		var sub struct {
			JobID           string  `json:"job_id"`
			CreditsConsumed float64 `json:"credits_consumed"`
		}
		if err := json.Unmarshal(r.Body, &sub); err != nil || sub.JobID == "" {
			return res, &PartialSubmitError{Err: fmt.Errorf("submission answer without a job id: %s", r.Body),
				Accepted: i, Parts: len(parts), Prefix: prefix, Handle: res.Handle}
		}
		replayed := r.Header.Get("Idempotent-Replayed") == "true"
		if !replayed {
			res.Credits += sub.CreditsConsumed
		}
		res.Handle.Family = f
		res.Handle.Jobs = append(res.Handle.Jobs, sub.JobID)
		m.Jobs = append(m.Jobs, ManifestJob{JobID: sub.JobID, Part: i + 1, FirstRow: part[0], Rows: part[1] - part[0],
			Response: json.RawMessage(bytes.TrimSpace(r.Body))})
		m.Handle = res.Handle.String()
		m.Complete = i == len(parts)-1
		if o.Manifest != "" {
			if err := m.Write(o.Manifest); err != nil {
				return res, fmt.Errorf("writing the manifest: %w", err)
			}
		}
		if replayed {
			log("part %d/%d: job %s, %d rows, accepted before (Idempotency-Key %s): not charged again", i+1, len(parts), sub.JobID, part[1]-part[0], hdr.Get("Idempotency-Key"))
		} else {
			log("part %d/%d: job %s, %d rows, %s credits", i+1, len(parts), sub.JobID, part[1]-part[0], fmtCredits(sub.CreditsConsumed))
		}
	}
	return res, nil
}

func fmtCredits(v float64) string {
	return strings.TrimSuffix(strings.TrimRight(fmt.Sprintf("%.3f", v), "0"), ".")
}

// PartialSubmitError is a submission that stopped after Accepted of Parts
// jobs were accepted.
type PartialSubmitError struct {
	Err      error
	Accepted int
	Parts    int
	Prefix   string
	Handle   Handle
}

func (e *PartialSubmitError) Error() string {
	if e.Accepted == 0 {
		return e.Err.Error()
	}
	return fmt.Sprintf("%v\n%d of %d jobs were accepted (%s); run the same command with --idempotency-key %s "+
		"within 24 hours to submit the rest: the accepted parts are answered again without a second charge",
		e.Err, e.Accepted, e.Parts, e.Handle, e.Prefix)
}

func (e *PartialSubmitError) Unwrap() error { return e.Err }

// JobStatus is one job's status answer.
type JobStatus struct {
	Status    string
	Total     int64 // result rows (the family's TotalField)
	Processed int64
	Raw       json.RawMessage
}

// Finished: the job's status is its family's final one.
func (s *JobStatus) Finished(f *Family) bool { return s.Status == f.Form.Final }

// GetStatus reads one job's status.
func GetStatus(ctx context.Context, c *Client, f *Family, id string) (*JobStatus, error) {
	r, err := c.Do(ctx, http.MethodGet, f.Path+"/"+id, nil, nil)
	if err != nil {
		return nil, err
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(r.Body, &m); err != nil {
		return nil, fmt.Errorf("job %s: reading the status: %w", id, err)
	}
	s := &JobStatus{Raw: json.RawMessage(bytes.TrimSpace(r.Body))}
	_ = json.Unmarshal(m["status"], &s.Status)
	_ = json.Unmarshal(m[f.Form.TotalField], &s.Total)
	_ = json.Unmarshal(m["total_processed"], &s.Processed)
	return s, nil
}

// Combined is the status of a handle: its jobs' statuses and their sums.
type Combined struct {
	Handle    string            `json:"handle"`
	Family    string            `json:"family"`
	Status    string            `json:"status"`
	Finished  bool              `json:"finished"`
	Total     int64             `json:"total_rows"`
	Processed int64             `json:"total_processed"`
	Jobs      []json.RawMessage `json:"jobs"`
	statuses  []*JobStatus
}

// combine sums the jobs' statuses. Status is the family's final status
// when every job has it, else the status of the first job that has not.
func combine(h Handle, sts []*JobStatus) *Combined {
	c := &Combined{Handle: h.String(), Family: h.Family.Kind, Finished: true, statuses: sts}
	for _, s := range sts {
		c.Total += s.Total
		c.Processed += s.Processed
		c.Jobs = append(c.Jobs, s.Raw)
		if !s.Finished(h.Family) && c.Finished {
			c.Finished = false
			c.Status = s.Status
		}
	}
	if c.Finished {
		c.Status = h.Family.Form.Final
	}
	return c
}

// Status reads every job of h.
func Status(ctx context.Context, c *Client, h Handle) (*Combined, error) {
	sts := h.known()
	if err := fill(ctx, c, h, sts); err != nil {
		return nil, err
	}
	return combine(h, sts), nil
}

// known is a status slot per job of h, the first filled when ResolveArg
// read it.
func (h Handle) known() []*JobStatus {
	sts := make([]*JobStatus, len(h.Jobs))
	if len(sts) > 0 {
		sts[0] = h.first
	}
	return sts
}

// fill reads the status of each job of h whose slot is empty.
func fill(ctx context.Context, c *Client, h Handle, sts []*JobStatus) error {
	for i, id := range h.Jobs {
		if sts[i] != nil {
			continue
		}
		s, err := GetStatus(ctx, c, h.Family, id)
		if err != nil {
			return err
		}
		sts[i] = s
	}
	return nil
}

// NotFinishedError: a job did not finish in time, or results were asked
// of a job still running.
type NotFinishedError struct{ Msg string }

func (e *NotFinishedError) Error() string { return e.Msg }

// Progress shows a wait's progress.
type Progress interface {
	Update(c *Combined)
	Done(c *Combined)
}

// WaitOptions are the flags of `wait`.
type WaitOptions struct {
	Interval time.Duration // between polls
	Timeout  time.Duration // 0: none
}

// Wait polls h's jobs until all are finished (finished jobs are not asked
// again). Connection failures and server errors during a poll are retried
// by the client (RetryFor), so a server restart does not end the wait.
func Wait(ctx context.Context, c *Client, h Handle, o WaitOptions, p Progress) (*Combined, error) {
	if o.Interval <= 0 {
		o.Interval = 5 * time.Second
	}
	var deadline time.Time
	if o.Timeout > 0 {
		deadline = time.Now().Add(o.Timeout)
	}
	sts := h.known()
	for {
		if err := fill(ctx, c, h, sts); err != nil {
			return nil, err
		}
		cb := combine(h, sts)
		if cb.Finished {
			if p != nil {
				p.Done(cb)
			}
			return cb, nil
		}
		if p != nil {
			p.Update(cb)
		}
		pause := o.Interval
		if !deadline.IsZero() {
			left := time.Until(deadline)
			if left <= 0 {
				return cb, &NotFinishedError{fmt.Sprintf("%s: not finished after %s (status %s, %d of %d rows processed)",
					h, o.Timeout, cb.Status, cb.Processed, cb.Total)}
			}
			pause = min(pause, left)
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return cb, ctx.Err()
		case <-t.C:
		}
		for i, s := range sts {
			if !s.Finished(h.Family) {
				sts[i] = nil // asked again
			}
		}
	}
}

// ResultsOptions are the flags of `results`.
type ResultsOptions struct {
	Out       string // file, "" or "-" for stdout
	Format    string // csv or jsonl; "" from Out's extension (stdout: jsonl)
	Overwrite bool   // start the file over instead of continuing it
	PageSize  int    // JSON page size (1..500)
	Stdout    io.Writer
}

// outFormat is the output format of o.
func (o ResultsOptions) outFormat() (string, error) {
	if o.Format != "" {
		if o.Format != "csv" && o.Format != "jsonl" {
			return "", usagef("--format %q: want csv or jsonl", o.Format)
		}
		return o.Format, nil
	}
	if o.Out == "" || o.Out == "-" {
		return "jsonl", nil
	}
	switch ext := strings.ToLower(o.Out[strings.LastIndexByte(o.Out, '.')+1:]); ext {
	case "csv":
		return "csv", nil
	case "jsonl", "ndjson", "json":
		return "jsonl", nil
	}
	return "", usagef("--out %s: name a .csv or .jsonl file, or give --format", o.Out)
}

// Results writes every result row of h's jobs, in submission order, to
// o.Out. A file that already holds rows is continued after them (a
// partial last row is cut off first); every job must be finished.
func Results(ctx context.Context, c *Client, h Handle, sts *Combined, o ResultsOptions, log func(string, ...any)) (written int64, err error) {
	format, err := o.outFormat()
	if err != nil {
		return 0, err
	}
	if !sts.Finished {
		return 0, &NotFinishedError{fmt.Sprintf("%s is not finished (status %s, %d of %d rows processed): run `bulkctl wait` first, or give --wait",
			h, sts.Status, sts.Processed, sts.Total)}
	}
	var w *output
	if o.Out == "" || o.Out == "-" {
		out := o.Stdout
		if out == nil {
			out = os.Stdout
		}
		w = newOutput(out, nil, format, 0, nil)
	} else if w, err = openOutput(o.Out, format, o.Overwrite); err != nil {
		return 0, err
	}
	defer w.close()
	w.log = log
	have := w.rows
	if have > 0 {
		log("%s already holds %d rows: continuing after them", o.Out, have)
	}
	var start int64
	for i, s := range sts.statuses {
		end := start + s.Total
		if have < end {
			offset := max(have-start, 0)
			n, err := w.fetch(ctx, c, h.Family, h.Jobs[i], offset, s.Total, o.PageSize)
			written += n
			have += n
			if err != nil {
				return written, err
			}
		}
		start = end
	}
	if have > start {
		return written, usagef("%s holds %d rows, more than the %d rows of %s: not its results file? (--overwrite starts it over)", o.Out, have, start, h)
	}
	return written, w.close()
}
