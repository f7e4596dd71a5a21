// Package bulkctl is the command-line client of bulkd's bulk API: submit a
// CSV or JSON Lines file to a family (split into several jobs when it is
// larger than one submission may be), follow the jobs, and download their
// results in submission order, resumably. cmd/bulkctl is its main.
package bulkctl

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/bulkd/bulkd/internal/family/form"
)

// Exit codes (docs/bulkctl.md).
const (
	ExitOK          = 0   // done
	ExitUsage       = 1   // bad command line, unreadable input, unwritable output
	ExitRefused     = 2   // the API refused the request (a 4xx answer)
	ExitFailure     = 3   // server errors or no connection, after the retries
	ExitNotFinished = 4   // wait --timeout ran out, or results of a job still running
	ExitInterrupted = 130 // interrupted (Ctrl-C)
)

// DefaultURL is where `make run` serves.
const DefaultURL = "http://127.0.0.1:8080"

// Env is what a run of bulkctl sees of its process.
type Env struct {
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	Getenv         func(string) string
	// Terminal: stderr is a terminal (a progress bar instead of lines).
	Terminal bool
	Version  string
}

// usage is the command line's help: a submit line per family it links
// (Commands), from the family's form.
func usage() string {
	var b strings.Builder
	b.WriteString("usage: bulkctl COMMAND [flags]\n\n")
	for _, f := range Commands() {
		fmt.Fprintf(&b, "  bulkctl %-7s submit FILE   %s (columns %s)\n", f.Kind, f.Form.Label, fieldNames(f.Form, ", ", func(fl form.Field) string { return fl.Name }))
	}
	return b.String() + usageRest
}

const usageRest = `      FILE is CSV with a header row, JSON Lines, or - for stdin; prints the job handle
      (FAMILY:ID[,ID...]: several jobs when the list is larger than one submission takes)
  bulkctl status  JOB           the jobs' status as JSON
  bulkctl wait    JOB           wait until the jobs finish (progress on stderr)
  bulkctl results JOB --out F   every result row in submission order to F.csv or F.jsonl
                                (continues a file that already holds rows)
  bulkctl delete  JOB           delete the jobs and everything they stored (a running job is stopped,
                                its unprocessed rows refunded); prints each answer as JSON
  bulkctl credits               GET /v1/credits (pay-as-you-go key)
  bulkctl usage                 GET /v1/unlimited/usage (unlimited-plan key)
  bulkctl version

JOB is a handle printed by submit, a job id, or a manifest file written by submit --manifest.
The key comes from BULKD_API_KEY or --key, the server from BULKD_URL or --url
(default ` + DefaultURL + `). Run "bulkctl COMMAND -h" for a command's flags;
docs/bulkctl.md has everything, exit codes included.
`

// columnHelp says which --column names a form takes.
func columnHelp(fm form.Form) string {
	switch {
	case fm.ByLook():
		return "one or more, each value placed by what it looks like"
	case len(fm.Fields) == 1:
		return "one"
	}
	return fieldNames(fm, ",", func(f form.Field) string { return f.Name }) + ", in this order"
}

// common are the flags every command takes.
type common struct {
	key, url                     string
	httpTimeout, retryFor, maxRA time.Duration
	quiet                        bool
}

func (c *common) register(fs *flag.FlagSet) {
	// Defaults from the environment are applied in client, so that -h
	// never prints a key.
	fs.StringVar(&c.key, "key", "", "API key (default $BULKD_API_KEY)")
	fs.StringVar(&c.url, "url", "", "bulkd base URL (default $BULKD_URL, else "+DefaultURL+")")
	fs.DurationVar(&c.httpTimeout, "http-timeout", 2*time.Minute, "time limit of one HTTP exchange (a download: longest pause)")
	fs.DurationVar(&c.retryFor, "retry-for", 2*time.Minute, "how long one call retries server errors and connection failures")
	fs.DurationVar(&c.maxRA, "max-retry-after", 5*time.Minute, "longest Retry-After to wait; a longer one ends the command")
	fs.BoolVar(&c.quiet, "quiet", false, "no progress or summary lines on stderr")
}

func (c *common) client(env Env) (*Client, error) {
	if c.key == "" {
		c.key = env.Getenv("BULKD_API_KEY")
	}
	if c.url == "" {
		c.url = env.Getenv("BULKD_URL")
	}
	if c.url == "" {
		c.url = DefaultURL
	}
	if !strings.HasPrefix(c.url, "http://") && !strings.HasPrefix(c.url, "https://") {
		return nil, usagef("--url %q: want http://HOST:PORT or https://...", c.url)
	}
	if c.key == "" {
		return nil, usagef("no API key: set BULKD_API_KEY or give --key")
	}
	cl := &Client{BaseURL: strings.TrimRight(c.url, "/"), Key: c.key, Timeout: c.httpTimeout,
		RetryFor: c.retryFor, MaxRetryAfter: c.maxRA, Backoff: 250 * time.Millisecond, MaxBackoff: 10 * time.Second,
		UserAgent: "bulkctl/" + env.Version}
	if !c.quiet {
		cl.Log = c.logf(env)
	}
	return cl, nil
}

// logf writes a line on stderr unless --quiet.
func (c *common) logf(env Env) func(string, ...any) {
	return func(format string, args ...any) {
		if !c.quiet {
			fmt.Fprintf(env.Stderr, "bulkctl: "+format+"\n", args...)
		}
	}
}

// parse parses flags anywhere among the arguments (flags after the
// positional ones too: `bulkctl verify submit list.csv --column mail`).
func parse(fs *flag.FlagSet, args []string) ([]string, error) {
	var flags, pos []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			pos = append(pos, args[i+1:]...)
			break
		}
		if len(a) < 2 || a[0] != '-' {
			pos = append(pos, a)
			continue
		}
		flags = append(flags, a)
		name := strings.TrimLeft(a, "-")
		if strings.Contains(name, "=") {
			continue
		}
		if f := fs.Lookup(name); f != nil {
			if b, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
				continue
			}
			if i+1 < len(args) {
				i++
				flags = append(flags, args[i])
			}
		}
	}
	if err := fs.Parse(flags); err != nil {
		return nil, err
	}
	return pos, nil
}

// Main runs bulkctl with args (without the program name) and returns the
// exit code.
func Main(ctx context.Context, args []string, env Env) int {
	if env.Getenv == nil {
		env.Getenv = os.Getenv
	}
	err := run(ctx, args, env)
	if err == nil {
		return ExitOK
	}
	if errors.Is(err, flag.ErrHelp) {
		return ExitOK
	}
	if errors.Is(err, context.Canceled) && ctx.Err() != nil {
		fmt.Fprintln(env.Stderr, "bulkctl: interrupted")
		return ExitInterrupted
	}
	fmt.Fprintf(env.Stderr, "bulkctl: %v\n", err)
	return ExitCode(err)
}

// ExitCode is the exit code of an error (docs/bulkctl.md).
func ExitCode(err error) int {
	var (
		ue *UsageError
		nf *NotFinishedError
		ae *APIError
		ne *NetError
	)
	switch {
	case err == nil:
		return ExitOK
	case errors.Is(err, context.Canceled):
		return ExitInterrupted
	case errors.As(err, &ue):
		return ExitUsage
	case errors.As(err, &nf):
		return ExitNotFinished
	case errors.As(err, &ae):
		if ae.Status >= 500 {
			return ExitFailure
		}
		return ExitRefused
	case errors.As(err, &ne):
		return ExitFailure
	}
	return ExitUsage
}

func run(ctx context.Context, args []string, env Env) error {
	if len(args) == 0 {
		fmt.Fprint(env.Stderr, usage())
		return &UsageError{errors.New("no command")}
	}
	cmd, rest := args[0], args[1:]
	switch cmd {
	case "help", "-h", "--help", "-help":
		fmt.Fprint(env.Stdout, usage())
		return nil
	case "version", "--version":
		fmt.Fprintf(env.Stdout, "bulkctl %s\n", env.Version)
		return nil
	case "status", "wait", "results":
		return runJob(ctx, cmd, rest, env)
	case "delete":
		return runDelete(ctx, rest, env)
	case "credits", "usage":
		return runAccount(ctx, cmd, rest, env)
	}
	if f, ok := command(cmd); ok {
		if len(rest) == 0 || rest[0] != "submit" {
			return usagef("usage: bulkctl %s submit FILE [flags]", cmd)
		}
		return runSubmit(ctx, f, rest[1:], env)
	}
	fmt.Fprint(env.Stderr, usage())
	return usagef("unknown command %q", cmd)
}

func newFlagSet(name string, env Env) *flag.FlagSet {
	fs := flag.NewFlagSet("bulkctl "+name, flag.ContinueOnError)
	fs.SetOutput(env.Stderr)
	return fs
}

func flagErr(err error) error {
	if errors.Is(err, flag.ErrHelp) {
		return err
	}
	return &UsageError{err}
}

func runSubmit(ctx context.Context, f *Family, args []string, env Env) error {
	fs := newFlagSet(f.Kind+" submit FILE", env)
	var cm common
	cm.register(fs)
	var o SubmitOptions
	var columns string
	var wait bool
	var wo WaitOptions
	fs.StringVar(&columns, "column", "", "input column(s) to read, comma separated ("+columnHelp(f.Form)+")")
	fs.StringVar(&o.Format, "format", "", "input format: csv or jsonl (default: from the file name, else from its first byte)")
	if u := unlimitedOf(f); u != nil {
		fs.BoolVar(&o.Unlimited, "unlimited", false, "submit to "+u.Path+" (an unlimited-plan key is also detected by itself)")
	}
	fs.IntVar(&o.ChunkRows, "chunk", 0, "rows per job at most (default and upper bound: the family's limit)")
	fs.StringVar(&o.Manifest, "manifest", "", "write a manifest of the jobs to this file (accepted by status, wait and results)")
	fs.StringVar(&o.IdempotencyKey, "idempotency-key", "", "prefix of the parts' Idempotency-Keys (default: random); reuse it to resume a submission cut short without paying twice")
	fs.BoolVar(&wait, "wait", false, "then wait until the jobs finish")
	fs.DurationVar(&wo.Interval, "interval", 5*time.Second, "with --wait: time between status polls")
	fs.DurationVar(&wo.Timeout, "timeout", 0, "with --wait: give up after this long (exit 4); 0: no limit")
	pos, err := parse(fs, args)
	if err != nil {
		return flagErr(err)
	}
	if len(pos) != 1 {
		return usagef("usage: bulkctl %s submit FILE [flags] (FILE may be - for stdin)", f.Kind)
	}
	o.Input = pos[0]
	if columns != "" {
		for _, c := range strings.Split(columns, ",") {
			o.Columns = append(o.Columns, strings.TrimSpace(c))
		}
	}
	c, err := cm.client(env)
	if err != nil {
		return err
	}
	var in io.Reader = env.Stdin
	if o.Input != "-" {
		fh, err := os.Open(o.Input)
		if err != nil {
			return &UsageError{err}
		}
		defer fh.Close()
		in = fh
	}
	log := cm.logf(env)
	res, err := Submit(ctx, c, f, in, o, log)
	if err != nil {
		return err
	}
	fmt.Fprintln(env.Stdout, res.Handle)
	log("submitted %s: %s credits consumed", res.Handle, fmtCredits(res.Credits))
	if !wait {
		return nil
	}
	cb, err := Wait(ctx, c, res.Handle, wo, NewProgress(env.Stderr, env.Terminal, cm.quiet))
	if err != nil {
		return err
	}
	return printJSON(env.Stdout, cb)
}

func runJob(ctx context.Context, cmd string, args []string, env Env) error {
	fs := newFlagSet(cmd+" JOB", env)
	var cm common
	cm.register(fs)
	var wo WaitOptions
	var ro ResultsOptions
	waitFirst := cmd == "wait"
	if cmd == "wait" || cmd == "results" {
		fs.DurationVar(&wo.Interval, "interval", 5*time.Second, "time between status polls")
		fs.DurationVar(&wo.Timeout, "timeout", 0, "give up waiting after this long (exit 4); 0: no limit")
	}
	if cmd == "results" {
		fs.StringVar(&ro.Out, "out", "", "output file, .csv or .jsonl (default: JSON Lines on stdout)")
		fs.StringVar(&ro.Format, "format", "", "csv or jsonl (default: from --out's extension)")
		fs.BoolVar(&ro.Overwrite, "overwrite", false, "start the output file over instead of continuing it")
		fs.BoolVar(&waitFirst, "wait", false, "wait for the jobs to finish first")
		fs.IntVar(&ro.PageSize, "page-size", 500, "rows per results page (JSON Lines; 1..500)")
	}
	pos, err := parse(fs, args)
	if err != nil {
		return flagErr(err)
	}
	if len(pos) != 1 {
		return usagef("usage: bulkctl %s JOB [flags] (JOB: a handle FAMILY:ID[,ID...], a job id or a manifest file)", cmd)
	}
	c, err := cm.client(env)
	if err != nil {
		return err
	}
	h, err := ResolveArg(ctx, c, pos[0])
	if err != nil {
		return err
	}
	var cb *Combined
	if waitFirst {
		cb, err = Wait(ctx, c, h, wo, NewProgress(env.Stderr, env.Terminal, cm.quiet))
	} else {
		cb, err = Status(ctx, c, h)
	}
	if err != nil {
		return err
	}
	switch cmd {
	case "status", "wait":
		return printJSON(env.Stdout, cb)
	}
	ro.Stdout = env.Stdout
	log := cm.logf(env)
	n, err := Results(ctx, c, h, cb, ro, log)
	if err != nil {
		return err
	}
	if ro.Out != "" && ro.Out != "-" {
		log("%s: %d rows written, %d in all", ro.Out, n, cb.Total)
	}
	return nil
}

// runDelete deletes every job of a handle (DELETE on each job's status
// path, docs/privacy.md) and prints each answer, one JSON line a job.
func runDelete(ctx context.Context, args []string, env Env) error {
	fs := newFlagSet("delete JOB", env)
	var cm common
	cm.register(fs)
	pos, err := parse(fs, args)
	if err != nil {
		return flagErr(err)
	}
	if len(pos) != 1 {
		return usagef("usage: bulkctl delete JOB [flags] (JOB: a handle FAMILY:ID[,ID...], a job id or a manifest file)")
	}
	c, err := cm.client(env)
	if err != nil {
		return err
	}
	h, err := ResolveArg(ctx, c, pos[0])
	if err != nil {
		return err
	}
	for _, id := range h.Jobs {
		r, err := c.Do(ctx, http.MethodDelete, h.Family.Path+"/"+id, nil, nil)
		if err != nil {
			return err
		}
		if _, err := fmt.Fprintf(env.Stdout, "%s\n", bytes.TrimSpace(r.Body)); err != nil {
			return err
		}
	}
	return nil
}

func runAccount(ctx context.Context, cmd string, args []string, env Env) error {
	fs := newFlagSet(cmd, env)
	var cm common
	cm.register(fs)
	pos, err := parse(fs, args)
	if err != nil {
		return flagErr(err)
	}
	if len(pos) != 0 {
		return usagef("usage: bulkctl %s [flags]", cmd)
	}
	c, err := cm.client(env)
	if err != nil {
		return err
	}
	path := "/v1/credits"
	if cmd == "usage" {
		path = "/v1/unlimited/usage"
	}
	r, err := c.Do(ctx, http.MethodGet, path, nil, nil)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(env.Stdout, "%s\n", bytes.TrimSpace(r.Body))
	return err
}

func printJSON(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", b)
	return err
}
