// Package spamc is a client of SpamAssassin's spamd over its SPAMC/1.5
// protocol (spamd/PROTOCOL in the SpamAssassin sources): REPORT for a
// message's score, threshold and rule table, PING for liveness.
//
// It is our own because no maintained Go client exists (the known ones,
// teamwork/spamc, baruwa-enterprise/spamc and cgt.name/pkg/spamc, have had
// no release since 2020 or earlier); the protocol is small, and the parsers
// here are fuzzed (FuzzReadResponse, FuzzParseReport).
//
// The protocol has no keep-alive: spamd answers one request per connection
// and closes it. What a pool gives elsewhere is given here by a bounded set
// of connection slots (MaxConns, sized to spamd's --max-children) with a
// bounded queue in front, a deadline on every exchange, and a circuit
// breaker, so that a spamd that is down, refusing or too slow costs callers
// a fast error instead of a hanging request, and traffic resumes by itself
// once spamd answers again.
package spamc

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"
)

// protocolVersion is the SPAMC protocol version the client speaks.
const protocolVersion = "1.5"

// Limits on what is read from spamd, so a broken or hostile server cannot
// make the client hold unbounded memory.
const (
	maxLineBytes   = 8 << 10
	maxHeaders     = 32
	MaxReportBytes = 1 << 20
)

// ErrUnavailable is wrapped by every error that means spamd could not give
// an answer: unreachable, refusing, too slow, busy, broken replies, or the
// breaker open after such failures. Callers map it to 503.
var ErrUnavailable = errors.New("spamd unavailable")

// ErrBusy is wrapped (with ErrUnavailable) by the errors of checks refused
// without trying: the queue is full, or the breaker is open. They say
// nothing new about spamd, so callers need not log each one.
var ErrBusy = errors.New("load shed")

// Client talks to one spamd. The zero value is not usable: set Addr (or use
// New). A Client is safe for concurrent use.
type Client struct {
	// Addr is spamd's TCP address, host:port.
	Addr string
	// DialTimeout bounds connecting (default 1 s): spamd is a local service,
	// a connect that takes longer means it is not there.
	DialTimeout time.Duration
	// Timeout bounds one check end to end, the wait for a free slot
	// included (default 10 s).
	Timeout time.Duration
	// MaxConns is how many checks run at once (default 5, spamd's default
	// --max-children): more would only queue inside spamd, where we could
	// not bound the wait.
	MaxConns int
	// MaxQueue is how many checks may wait for a slot (default 4 x
	// MaxConns); past it a check fails at once as busy.
	MaxQueue int
	// FailureThreshold consecutive failures open the breaker (default 3);
	// while open, checks fail at once for Cooldown (default 2 s), then one
	// trial check is let through and its outcome closes or reopens it.
	FailureThreshold int
	Cooldown         time.Duration
	// Now is the breaker's clock (tests); nil is time.Now.
	Now func() time.Time

	once  sync.Once
	slots chan struct{}
	queue chan struct{}

	mu        sync.Mutex
	failures  int
	openUntil time.Time
	trial     bool // a trial check is in flight while half-open
}

// New returns a client of the spamd at addr with the defaults.
func New(addr string) *Client { return &Client{Addr: addr} }

func (c *Client) init() {
	c.once.Do(func() {
		if c.DialTimeout <= 0 {
			c.DialTimeout = time.Second
		}
		if c.Timeout <= 0 {
			c.Timeout = 10 * time.Second
		}
		if c.MaxConns <= 0 {
			c.MaxConns = 5
		}
		if c.MaxQueue <= 0 {
			c.MaxQueue = 4 * c.MaxConns
		}
		if c.FailureThreshold <= 0 {
			c.FailureThreshold = 3
		}
		if c.Cooldown <= 0 {
			c.Cooldown = 2 * time.Second
		}
		if c.Now == nil {
			c.Now = time.Now
		}
		c.slots = make(chan struct{}, c.MaxConns)
		c.queue = make(chan struct{}, c.MaxConns+c.MaxQueue)
	})
}

// Result is spamd's answer to REPORT.
type Result struct {
	Spam      bool
	Score     float64
	Threshold float64
	// Rules are the rules that fired, in the report's order.
	Rules []Rule
	// Report is the report text as spamd sent it.
	Report string
}

// Rule is one line of the report's rule table.
type Rule struct {
	Name        string
	Score       float64
	Description string
}

// Report sends msg (an RFC 5322 message) with REPORT and parses the answer.
func (c *Client) Report(ctx context.Context, msg []byte) (*Result, error) {
	var res *Result
	err := c.do(ctx, "REPORT", msg, func(r *Response) error {
		var err error
		res, err = r.Result()
		return err
	})
	return res, err
}

// Ping asks spamd whether it is alive (PING; PONG expected).
func (c *Client) Ping(ctx context.Context) error {
	return c.do(ctx, "PING", nil, func(r *Response) error {
		if r.Message != "PONG" {
			return fmt.Errorf("%w: PING answered %q", ErrUnavailable, r.Message)
		}
		return nil
	})
}

// Available reports whether the breaker lets checks through now. It is
// advisory (another goroutine may change it a moment later).
func (c *Client) Available() bool {
	c.init()
	c.mu.Lock()
	defer c.mu.Unlock()
	return !c.refusing()
}

// refusing: the breaker refuses checks (open, or half-open with its one
// trial in flight). mu held.
func (c *Client) refusing() bool {
	if c.failures < c.FailureThreshold {
		return false
	}
	return c.Now().Before(c.openUntil) || c.trial
}

// admit asks the breaker for a check; trial is true when this check is the
// half-open trial.
func (c *Client) admit() (trial bool, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.failures < c.FailureThreshold {
		return false, nil
	}
	if c.refusing() {
		return false, fmt.Errorf("%w: %w: %d checks in a row failed; not trying again before %s",
			ErrUnavailable, ErrBusy, c.failures, c.openUntil.Format(time.RFC3339Nano))
	}
	c.trial = true
	return true, nil
}

// outcome is what a check says about spamd's health.
type outcome int

const (
	answered outcome = iota // spamd answered
	failed                  // spamd did not answer in time, refused, or answered nonsense
	neutral                 // nothing learnt: the caller left, or we never tried
)

// settle records the outcome of an admitted check.
func (c *Client) settle(trial bool, o outcome) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if trial {
		c.trial = false
	}
	switch o {
	case answered:
		c.failures = 0
	case failed:
		c.failures++
		if c.failures >= c.FailureThreshold {
			c.openUntil = c.Now().Add(c.Cooldown)
		}
	}
}

// judge is the outcome of a finished exchange: failures count only while
// the caller is still waiting for the answer.
func judge(ctx context.Context, err error) outcome {
	switch {
	case err == nil:
		return answered
	case callerStayed(ctx):
		return failed
	}
	return neutral
}

// do runs one exchange: a queue place, a slot, a connection, the request,
// the response handed to parse.
func (c *Client) do(ctx context.Context, method string, body []byte, parse func(*Response) error) error {
	c.init()
	if c.Addr == "" {
		return fmt.Errorf("%w: no spamd address configured", ErrUnavailable)
	}
	trial, err := c.admit()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()
	select {
	case c.queue <- struct{}{}:
	default:
		c.settle(trial, neutral)
		return fmt.Errorf("%w: %w: busy (%d checks running, %d waiting)", ErrUnavailable, ErrBusy, c.MaxConns, c.MaxQueue)
	}
	defer func() { <-c.queue }()
	select {
	case c.slots <- struct{}{}:
	case <-ctx.Done():
		// Waited for a slot until the deadline: spamd is too slow for the
		// load. That says something about spamd only if the caller did not
		// leave first.
		c.settle(trial, judge(ctx, ctx.Err()))
		return fmt.Errorf("%w: no free connection within %s: %w", ErrUnavailable, c.Timeout, ctx.Err())
	}
	defer func() { <-c.slots }()

	err = c.exchange(ctx, method, body, parse)
	c.settle(trial, judge(ctx, err))
	return err
}

// callerStayed is false when ctx ended because its parent did (the client
// went away), not because our own timeout ran out.
func callerStayed(ctx context.Context) bool {
	return ctx.Err() == nil || errors.Is(context.Cause(ctx), context.DeadlineExceeded)
}

func (c *Client) exchange(ctx context.Context, method string, body []byte, parse func(*Response) error) error {
	d := net.Dialer{Timeout: c.DialTimeout}
	conn, err := d.DialContext(ctx, "tcp", c.Addr)
	if err != nil {
		return fmt.Errorf("%w: connect %s: %w", ErrUnavailable, c.Addr, err)
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	// A context that ends early (the caller left) unblocks the exchange.
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()

	if err := writeRequest(conn, method, body); err != nil {
		return fmt.Errorf("%w: send %s: %w", ErrUnavailable, method, err)
	}
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.CloseWrite() // nothing more to send; spamc does the same
	}
	resp, err := ReadResponse(bufio.NewReaderSize(conn, 16<<10))
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("%w: no answer within %s: %w", ErrUnavailable, c.Timeout, err)
		}
		return fmt.Errorf("%w: read %s answer: %w", ErrUnavailable, method, err)
	}
	if resp.Code != 0 {
		return fmt.Errorf("%w: %s answered %d %s", ErrUnavailable, method, resp.Code, resp.Message)
	}
	if err := parse(resp); err != nil {
		if errors.Is(err, ErrUnavailable) {
			return err
		}
		return fmt.Errorf("%w: %s answer: %w", ErrUnavailable, method, err)
	}
	return nil
}

// writeRequest writes one SPAMC request: the method line, Content-length
// when there is a body, the blank line, the body (one writev on a TCP
// connection: neither is copied).
func writeRequest(w io.Writer, method string, body []byte) error {
	head := method + " SPAMC/" + protocolVersion + "\r\n"
	if body != nil {
		head += "Content-length: " + strconv.Itoa(len(body)) + "\r\n"
	}
	bufs := net.Buffers{[]byte(head + "\r\n"), body}
	_, err := bufs.WriteTo(w)
	return err
}

// Response is a parsed SPAMD response.
type Response struct {
	Version string // e.g. 1.1
	Code    int    // 0 is EX_OK; others are sysexits codes (76 EX_PROTOCOL, ...)
	Message string // EX_OK, PONG, or the error text
	Headers map[string]string
	Body    []byte
}

// ReadResponse reads a SPAMD response: status line, headers, blank line,
// body of Content-length bytes (or to EOF without one), each bounded.
func ReadResponse(r *bufio.Reader) (*Response, error) {
	line, err := readLine(r)
	if err != nil {
		return nil, fmt.Errorf("status line: %w", err)
	}
	rest, ok := strings.CutPrefix(line, "SPAMD/")
	if !ok {
		return nil, fmt.Errorf("status line %q: not SPAMD/", clip(line))
	}
	ver, rest, _ := strings.Cut(rest, " ")
	codeS, msg, _ := strings.Cut(rest, " ")
	code, err := strconv.Atoi(codeS)
	if err != nil || code < 0 || code > 255 || ver == "" {
		return nil, fmt.Errorf("status line %q: malformed", clip(line))
	}
	resp := &Response{Version: ver, Code: code, Message: strings.TrimSpace(msg), Headers: map[string]string{}}
	if code != 0 {
		// Errors carry no headers or body, and spamd closes at once.
		return resp, nil
	}
	for n := 0; ; n++ {
		line, err := readLine(r)
		if err == io.EOF && n == 0 {
			return resp, nil // PONG: the status line alone
		}
		if err != nil {
			return nil, fmt.Errorf("headers: %w", err)
		}
		if line == "" {
			break
		}
		if n >= maxHeaders {
			return nil, fmt.Errorf("more than %d headers", maxHeaders)
		}
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			return nil, fmt.Errorf("header line %q: no colon", clip(line))
		}
		resp.Headers[strings.ToLower(strings.TrimSpace(k))] = strings.TrimSpace(v)
	}
	if cl, ok := resp.Headers["content-length"]; ok {
		n, err := strconv.Atoi(cl)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("Content-length %q: malformed", clip(cl))
		}
		if n > MaxReportBytes {
			return nil, fmt.Errorf("Content-length %d: over the %d byte limit", n, MaxReportBytes)
		}
		resp.Body = make([]byte, n)
		if _, err := io.ReadFull(r, resp.Body); err != nil {
			return nil, fmt.Errorf("body: %w", err)
		}
		return resp, nil
	}
	body, err := io.ReadAll(io.LimitReader(r, MaxReportBytes+1))
	if err != nil {
		return nil, fmt.Errorf("body: %w", err)
	}
	if len(body) > MaxReportBytes {
		return nil, fmt.Errorf("body over the %d byte limit", MaxReportBytes)
	}
	resp.Body = body
	return resp, nil
}

// readLine reads one line ending in LF (CR stripped), at most maxLineBytes.
func readLine(r *bufio.Reader) (string, error) {
	var b []byte
	for {
		chunk, err := r.ReadSlice('\n')
		b = append(b, chunk...)
		if len(b) > maxLineBytes {
			return "", fmt.Errorf("line over %d bytes", maxLineBytes)
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		if err != nil {
			if err == io.EOF && len(b) > 0 {
				return "", io.ErrUnexpectedEOF
			}
			return "", err
		}
		return strings.TrimRight(string(b), "\r\n"), nil
	}
}

// Result interprets a REPORT response: the Spam header and the report.
func (r *Response) Result() (*Result, error) {
	h, ok := r.Headers["spam"]
	if !ok {
		return nil, errors.New("no Spam header")
	}
	spam, score, threshold, err := ParseSpamHeader(h)
	if err != nil {
		return nil, err
	}
	return &Result{Spam: spam, Score: score, Threshold: threshold, Rules: ParseReport(string(r.Body)), Report: string(r.Body)}, nil
}

// ParseSpamHeader reads "True ; 15.3 / 5.0" (also Yes/No, as older spamd
// versions wrote).
func ParseSpamHeader(h string) (spam bool, score, threshold float64, err error) {
	verdict, nums, ok := strings.Cut(h, ";")
	if !ok {
		return false, 0, 0, fmt.Errorf("Spam header %q: no ';'", clip(h))
	}
	switch strings.ToLower(strings.TrimSpace(verdict)) {
	case "true", "yes":
		spam = true
	case "false", "no":
	default:
		return false, 0, 0, fmt.Errorf("Spam header %q: verdict is not True or False", clip(h))
	}
	sS, tS, ok := strings.Cut(nums, "/")
	if !ok {
		return false, 0, 0, fmt.Errorf("Spam header %q: no score / threshold", clip(h))
	}
	if score, err = parseScore(sS); err != nil {
		return false, 0, 0, fmt.Errorf("Spam header %q: score: %w", clip(h), err)
	}
	if threshold, err = parseScore(tS); err != nil {
		return false, 0, 0, fmt.Errorf("Spam header %q: threshold: %w", clip(h), err)
	}
	return spam, score, threshold, nil
}

// parseScore reads a finite decimal score; spamd never sends exponents,
// NaN or infinities, and JSON could not carry the last two.
func parseScore(s string) (float64, error) {
	s = strings.TrimSpace(s)
	if s == "" || strings.ContainsAny(s, "eEnNiIxX_") {
		return 0, fmt.Errorf("%q is not a decimal", clip(s))
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0, fmt.Errorf("%q is not a decimal", clip(s))
	}
	if f == 0 {
		f = 0 // -0.0 reads as 0: a JSON "-0" would only confuse
	}
	return f, nil
}

// ParseReport extracts the rule table from a REPORT body in the layout of
// SpamAssassin's default report template:
//
//	 pts rule name              description
//	---- ---------------------- --------------------------------------------------
//	 1.0 DEAR_FRIEND            BODY: Dear Friend? That's not very dear!
//	                            continued description, or [details]
//
// Rows start with a score and a rule name; indented lines continue the row
// above (bracketed ones are the rule's log details, which are dropped). A
// report whose template has no table yields no rules.
func ParseReport(report string) []Rule {
	var rules []Rule
	lines := strings.Split(report, "\n")
	i := 0
	for ; i < len(lines); i++ {
		if strings.HasPrefix(strings.TrimSpace(lines[i]), "----") {
			break
		}
	}
	for i++; i < len(lines); i++ {
		line := strings.TrimRight(lines[i], "\r \t")
		if strings.TrimSpace(line) == "" {
			break // the table ends at the first blank line
		}
		fields := strings.Fields(line)
		if len(fields) >= 2 && isRuleName(fields[1]) {
			if score, err := parseScore(fields[0]); err == nil && !startsIndented(line) {
				rest := strings.TrimSpace(strings.TrimSpace(line)[len(fields[0]):])
				desc := strings.TrimSpace(rest[len(fields[1]):])
				rules = append(rules, Rule{Name: fields[1], Score: score, Description: desc})
				continue
			}
		}
		if len(rules) == 0 {
			continue
		}
		cont := strings.TrimSpace(line)
		if strings.HasPrefix(cont, "[") {
			continue // the rule's details, e.g. [URIs: example.com]
		}
		r := &rules[len(rules)-1]
		if r.Description == "" {
			r.Description = cont
		} else {
			r.Description += " " + cont
		}
	}
	return rules
}

// startsIndented: a continuation line is indented past the score column
// (the score is right-aligned in 4 characters, so a row starts within them).
func startsIndented(line string) bool {
	return len(line)-len(strings.TrimLeft(line, " \t")) > 4
}

func isRuleName(s string) bool {
	if s == "" || len(s) > 128 {
		return false
	}
	for _, r := range s {
		if !(r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_' || r == '.') {
			return false
		}
	}
	return true
}

// clip shortens what spamd sent before it goes into an error message.
func clip(s string) string {
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}
