package bulkctl

import (
	"fmt"
	"io"
	"time"

	"github.com/schollz/progressbar/v3"
)

// NewProgress is a progress bar on a terminal, plain lines otherwise (one
// whenever the figures change), or nothing when quiet.
func NewProgress(w io.Writer, terminal, quiet bool) Progress {
	switch {
	case quiet:
		return nil
	case terminal:
		return &barProgress{w: w}
	}
	return &lineProgress{w: w}
}

type barProgress struct {
	w   io.Writer
	bar *progressbar.ProgressBar
}

func (p *barProgress) Update(c *Combined) {
	if p.bar == nil {
		p.bar = progressbar.NewOptions64(max(c.Total, 1),
			progressbar.OptionSetWriter(p.w),
			progressbar.OptionSetDescription(c.Family),
			progressbar.OptionShowCount(),
			progressbar.OptionSetPredictTime(true),
			progressbar.OptionSetElapsedTime(true),
			progressbar.OptionSetWidth(30),
			progressbar.OptionThrottle(100*time.Millisecond),
			progressbar.OptionSetRenderBlankState(true),
			progressbar.OptionOnCompletion(func() { fmt.Fprintln(p.w) }),
		)
	}
	if p.bar.GetMax64() != max(c.Total, 1) {
		p.bar.ChangeMax64(max(c.Total, 1))
	}
	p.bar.Describe(fmt.Sprintf("%s (%s)", c.Family, c.Status))
	// Processed reaches the total before a verification job's retries are
	// done: hold the bar one short of the end until it has finished.
	_ = p.bar.Set64(min(c.Processed, max(c.Total, 1)-1))
}

func (p *barProgress) Done(c *Combined) {
	if p.bar == nil {
		p.Update(c)
	}
	p.bar.Describe(fmt.Sprintf("%s (%s)", c.Family, c.Status))
	_ = p.bar.Set64(max(c.Total, 1))
	_ = p.bar.Finish()
}

type lineProgress struct {
	w    io.Writer
	last string
}

func (p *lineProgress) line(c *Combined) string {
	pct := 100.0
	if c.Total > 0 {
		pct = float64(c.Processed) * 100 / float64(c.Total)
	}
	jobs := ""
	if n := len(c.Jobs); n > 1 {
		jobs = fmt.Sprintf(" in %d jobs", n)
	}
	return fmt.Sprintf("%s: %s, %d/%d rows processed (%.1f%%)%s", c.Family, c.Status, c.Processed, c.Total, pct, jobs)
}

func (p *lineProgress) Update(c *Combined) {
	l := p.line(c)
	if l != p.last {
		fmt.Fprintf(p.w, "%s %s\n", time.Now().UTC().Format(time.TimeOnly), l)
		p.last = l
	}
}

func (p *lineProgress) Done(c *Combined) { p.Update(c) }
