package admin

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/bulkd/bulkd/internal/billing"
)

// LedgerUsage documents the ledger's archive commands.
const LedgerUsage = `  ledger export ACCOUNT [--since ENTRY_ID] [--before DATE] [--output FILE] [--archive]
                                                   write ledger entries as JSON lines, oldest first; with --archive
                                                   (needs --before, and --output FILE or stdout redirected to a file)
                                                   delete exactly the written entries once the file is fsynced,
                                                   adding their totals to the account's archive marker
  ledger reconcile ACCOUNT                         print balance vs ledger (opening + archived + entries) as JSON;
                                                   exit status 1 when they differ
`

// ledgerSub runs `ledger export` and `ledger reconcile`; false when args
// name neither.
func ledgerSub(ctx context.Context, bl *billing.Billing, env Env, args []string) (bool, error) {
	if len(args) == 0 {
		return false, nil
	}
	switch args[0] {
	case "export":
		return true, ledgerExport(ctx, bl, env, args[1:])
	case "reconcile":
		return true, ledgerReconcile(ctx, bl, env, args[1:])
	}
	return false, nil
}

// parseDate reads --before: RFC 3339, or a date (midnight UTC).
func parseDate(s string) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	t, err := time.Parse(time.DateOnly, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("want RFC 3339 (2026-01-01T00:00:00Z) or a date (2026-01-01), got %q", s)
	}
	return t, nil
}

// syncer is a writer whose data can be forced to stable storage.
type syncer interface{ Sync() error }

func ledgerExport(ctx context.Context, bl *billing.Billing, env Env, args []string) error {
	account, opt, output, archive, err := exportArgs(env, args)
	if err != nil {
		return err
	}
	dest, err := openExport(env, output, archive)
	if err != nil {
		return err
	}
	defer dest.abandon()
	w := bufio.NewWriterSize(dest.out, 256<<10)
	enc := json.NewEncoder(w)
	x, err := bl.ExportLedger(ctx, account, opt, func(e billing.Entry) error { return enc.Encode(e) })
	if err != nil {
		return err
	}
	if err := w.Flush(); err != nil {
		return fmt.Errorf("write export: %w", err)
	}
	if err := dest.commit(); err != nil {
		return err
	}

	type summary struct {
		*billing.Export
		Output   string            `json:"output,omitempty"`
		Archived *int64            `json:"archived,omitempty"`
		Marker   *billing.Archived `json:"archive_marker,omitempty"`
	}
	s := summary{Export: x, Output: output}
	if archive && x.Entries > 0 {
		n, err := bl.ArchiveLedger(ctx, x)
		s.Archived = &n
		if err != nil {
			return fmt.Errorf("archived %d of %d exported entries: %w", n, x.Entries, err)
		}
	}
	if archive {
		m, err := bl.ArchiveInfo(ctx, account)
		if err != nil {
			return err
		}
		s.Marker = &m
	}
	// The summary is the command's result when the entries went to a
	// file; otherwise stdout carries the entries only.
	dst := env.Stdout
	if output == "" {
		dst = env.Stderr
	}
	return json.NewEncoder(dst).Encode(s)
}

// exportArgs parses `ledger export`'s arguments: the account, what to
// export, where to (--output, "" stdout) and whether to archive.
func exportArgs(env Env, args []string) (account string, opt billing.ExportOptions, output string, archive bool, err error) {
	fs := newFlags(env, "ledger export")
	since := fs.String("since", "", "export the entries after this entry id")
	before := fs.String("before", "", "export only entries appended before this time (RFC 3339, or a date: midnight UTC)")
	out := fs.String("output", "", "write to this new file (it must not exist) instead of stdout")
	arch := fs.Bool("archive", false, "delete the exported entries from Redis once they are written and fsynced (needs --before)")
	pos, err := parse(fs, args, 1)
	if err != nil {
		return "", opt, "", false, err
	}
	opt.Since = *since
	if *before != "" {
		if opt.Before, err = parseDate(*before); err != nil {
			return "", opt, "", false, fmt.Errorf("--before: %w", err)
		}
	}
	if *arch {
		// An archive is the oldest part of the ledger, cut at a time the
		// operator chose: a cut "now" would race with the entries being
		// appended, and a --since would leave a hole.
		switch {
		case opt.Before.IsZero():
			err = errors.New("--archive needs --before DATE (the entries before it are archived)")
		case *since != "":
			err = errors.New("--archive exports from the oldest entry still in the ledger; drop --since")
		case opt.Before.After(env.Now()):
			err = fmt.Errorf("--before %s is in the future", opt.Before.Format(time.RFC3339))
		}
	}
	return pos[0], opt, *out, *arch, err
}

// exportDest is where an export's entries go. With --archive they must
// reach stable storage before anything is deleted, so the destination
// must be a file: --output, or a stdout that can be fsynced.
type exportDest struct {
	out     io.Writer
	stdout  io.Writer
	archive bool
	// file is --output's file, written under the temporary name tmp and
	// renamed to final when complete, so a file with the final name is
	// always a whole export; nil once committed (or for stdout).
	file       *os.File
	tmp, final string
}

func openExport(env Env, output string, archive bool) (*exportDest, error) {
	d := &exportDest{out: env.Stdout, stdout: env.Stdout, archive: archive, final: output}
	if output == "" {
		if archive {
			if s, ok := env.Stdout.(syncer); !ok || s.Sync() != nil {
				return nil, errors.New("--archive writes to a file it can fsync: give --output FILE, or redirect stdout to a file")
			}
		}
		return d, nil
	}
	if _, err := os.Lstat(output); err == nil {
		return nil, fmt.Errorf("--output %s exists; an export never overwrites one", output)
	}
	f, err := os.CreateTemp(filepath.Dir(output), "."+filepath.Base(output)+".*.tmp")
	if err != nil {
		return nil, fmt.Errorf("--output: %w", err)
	}
	d.file, d.tmp, d.out = f, f.Name(), f
	return d, nil
}

// commit makes the written export durable: the file fsynced, renamed to
// its final name and its directory fsynced; stdout fsynced when
// archiving.
func (d *exportDest) commit() error {
	if d.file == nil {
		if d.archive {
			if err := d.stdout.(syncer).Sync(); err != nil {
				return fmt.Errorf("fsync stdout: %w", err)
			}
		}
		return nil
	}
	if err := d.file.Sync(); err != nil {
		return fmt.Errorf("fsync %s: %w", d.tmp, err)
	}
	if err := d.file.Close(); err != nil {
		return fmt.Errorf("close %s: %w", d.tmp, err)
	}
	if err := os.Rename(d.tmp, d.final); err != nil {
		return fmt.Errorf("rename to %s: %w", d.final, err)
	}
	d.file = nil
	return syncDir(filepath.Dir(d.final))
}

// abandon removes an export file that was not committed.
func (d *exportDest) abandon() {
	if d.file != nil {
		_ = d.file.Close()
		_ = os.Remove(d.tmp)
	}
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("fsync %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil && !strings.Contains(err.Error(), "invalid argument") {
		return fmt.Errorf("fsync %s: %w", dir, err)
	}
	return nil
}

func ledgerReconcile(ctx context.Context, bl *billing.Billing, env Env, args []string) error {
	fs := newFlags(env, "ledger reconcile")
	pos, err := parse(fs, args, 1)
	if err != nil {
		return err
	}
	r, err := bl.Reconcile(ctx, pos[0])
	if err != nil {
		return err
	}
	type view struct {
		*billing.Reconciliation
		LedgerSum string `json:"ledger_sum"`
		OK        bool   `json:"ok"`
	}
	enc := json.NewEncoder(env.Stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(view{Reconciliation: r, LedgerSum: r.Sum().String(), OK: r.Err() == nil}); err != nil {
		return err
	}
	return r.Err()
}
