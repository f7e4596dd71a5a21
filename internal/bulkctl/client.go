package bulkctl

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Client talks to one bulkd with one API key. Every call has a timeout;
// 429 and 503 answers are retried after their Retry-After, other 5xx
// answers and connection errors after an exponential backoff with jitter,
// both bounded (RetryFor, MaxRetryAfter).
type Client struct {
	BaseURL string // e.g. http://127.0.0.1:8080, no trailing slash
	Key     string
	// Timeout bounds one HTTP exchange (for a streamed download: the
	// longest pause between two reads).
	Timeout time.Duration
	// RetryFor is how long one call keeps retrying server errors and
	// connection failures before it gives up.
	RetryFor time.Duration
	// MaxRetryAfter is the longest Retry-After the client waits; a
	// longer one (a daily quota until midnight) ends the call.
	MaxRetryAfter time.Duration
	// Backoff is the first backoff delay (doubled each time up to
	// MaxBackoff, with jitter).
	Backoff, MaxBackoff time.Duration
	// Log receives one line per retry (nil: silent).
	Log       func(format string, args ...any)
	UserAgent string

	// pace keeps the client under the key's rate limit: 20 requests a
	// second (SPEC 8) until an answer's X-RateLimit-Limit says otherwise,
	// so that polling many jobs does not run into 429s.
	paceOnce sync.Once
	pace     *rate.Limiter
}

func (c *Client) limiter() *rate.Limiter {
	c.paceOnce.Do(func() { c.pace = rate.NewLimiter(20, 20) })
	return c.pace
}

// learnLimit adopts the server's X-RateLimit-Limit (requests per second).
func (c *Client) learnLimit(h http.Header) {
	n, err := strconv.Atoi(h.Get("X-RateLimit-Limit"))
	if err != nil || n <= 0 {
		return
	}
	if l := c.limiter(); l.Limit() != rate.Limit(n) {
		l.SetLimit(rate.Limit(n))
		l.SetBurst(n)
	}
}

// APIError is an answer the client did not retry, or stopped retrying:
// the status and the error body's fields (SPEC 2.10).
type APIError struct {
	Method, Path string
	Status       int
	Code         string
	Detail       string
	RetryAfter   time.Duration
}

func (e *APIError) Error() string {
	msg := e.Detail
	if msg == "" {
		msg = http.StatusText(e.Status)
	}
	s := fmt.Sprintf("%s %s: %d", e.Method, e.Path, e.Status)
	if e.Code != "" {
		s += " " + e.Code
	}
	s += ": " + msg
	if e.RetryAfter > 0 {
		s += fmt.Sprintf(" (Retry-After %s)", e.RetryAfter)
	}
	return s
}

// NetError is a call that never got an answer after its retries.
type NetError struct {
	Method, Path string
	Err          error
	Attempts     int
}

func (e *NetError) Error() string {
	return fmt.Sprintf("%s %s: no answer after %d attempts: %v", e.Method, e.Path, e.Attempts, e.Err)
}

func (e *NetError) Unwrap() error { return e.Err }

// Response is a whole 2xx answer.
type Response struct {
	Header http.Header
	Body   []byte
}

func (c *Client) logf(format string, args ...any) {
	if c.Log != nil {
		c.Log(format, args...)
	}
}

func (c *Client) wait(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// retrier decides, attempt by attempt, whether and how long to wait.
type retrier struct {
	c        *Client
	start    time.Time
	attempts int
	failures int // server errors and connection failures so far
}

// backoff is the next exponential delay with jitter: a random point in
// the upper half of min(MaxBackoff, Backoff * 2^failures).
func (r *retrier) backoff() time.Duration {
	d := r.c.Backoff
	if d <= 0 {
		d = 250 * time.Millisecond
	}
	maxB := r.c.MaxBackoff
	if maxB <= 0 {
		maxB = 10 * time.Second
	}
	for i := 1; i < r.failures && d < maxB; i++ {
		d *= 2
	}
	d = min(d, maxB)
	return d/2 + rand.N(d/2+1)
}

// next reports how long to wait before the next attempt after a failure
// (a server error, a connection failure, or a 429/503 with retryAfter), or
// false to give up.
func (r *retrier) next(retryAfter time.Duration, serverFailure bool) (time.Duration, bool) {
	var d time.Duration
	if serverFailure {
		r.failures++
	}
	switch {
	case retryAfter > 0:
		if retryAfter > r.c.MaxRetryAfter {
			return 0, false
		}
		// A small jitter so that many clients told the same second do
		// not come back at once; never earlier than asked.
		d = retryAfter + rand.N(retryAfter/10+1)
	default:
		d = r.backoff()
	}
	if serverFailure && time.Since(r.start)+d > r.c.RetryFor {
		return 0, false
	}
	return d, true
}

// Do sends a request and reads the whole answer, retrying as described on
// Client. A 2xx is returned; anything else ends as *APIError or
// *NetError.
func (c *Client) Do(ctx context.Context, method, path string, body []byte, header http.Header) (*Response, error) {
	res, err := c.exchange(ctx, method, path, body, header, false)
	if err != nil {
		return nil, err
	}
	return res.(*Response), nil
}

// GetJSON GETs path and decodes a 2xx answer into v.
func (c *Client) GetJSON(ctx context.Context, path string, v any) error {
	res, err := c.Do(ctx, http.MethodGet, path, nil, nil)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(res.Body, v); err != nil {
		return fmt.Errorf("GET %s: reading the answer: %w", path, err)
	}
	return nil
}

// Stream GETs path and returns the open 2xx answer; its body's reads time
// out after Timeout without a byte. The caller closes the body.
func (c *Client) Stream(ctx context.Context, path string) (*http.Response, error) {
	res, err := c.exchange(ctx, http.MethodGet, path, nil, nil, true)
	if err != nil {
		return nil, err
	}
	return res.(*http.Response), nil
}

func (c *Client) exchange(ctx context.Context, method, path string, body []byte, header http.Header, stream bool) (any, error) {
	r := &retrier{c: c, start: time.Now()}
	for {
		r.attempts++
		res, retryAfter, serverFailure, err := c.once(ctx, method, path, body, header, stream)
		if err == nil {
			return res, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		var ae *APIError
		isAPI := errors.As(err, &ae)
		if isAPI && !retryable(ae) {
			return nil, err
		}
		d, ok := r.next(retryAfter, serverFailure)
		if !ok {
			if isAPI {
				return nil, err
			}
			return nil, &NetError{Method: method, Path: path, Err: err, Attempts: r.attempts}
		}
		c.logf("%v; retrying in %s", err, d.Round(time.Millisecond))
		if err := c.wait(ctx, d); err != nil {
			return nil, err
		}
	}
}

// retryable: 429 and 503 (after their Retry-After), other 5xx, and the
// 409 of an Idempotency-Key whose first request is still running.
func retryable(e *APIError) bool {
	switch {
	case e.Status == http.StatusTooManyRequests, e.Status >= 500:
		return true
	case e.Status == http.StatusConflict && e.Code == "idempotency_in_progress":
		return true
	}
	return false
}

// once is one attempt. It returns the answer, or the error with the
// Retry-After to honour and whether it was a server or connection failure.
func (c *Client) once(ctx context.Context, method, path string, body []byte, header http.Header, stream bool) (any, time.Duration, bool, error) {
	if err := c.limiter().Wait(ctx); err != nil {
		return nil, 0, false, err
	}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	actx, cancel := context.WithCancel(ctx)
	timer := time.AfterFunc(c.timeout(), cancel)
	req, err := http.NewRequestWithContext(actx, method, c.BaseURL+path, rd)
	if err != nil {
		cancel()
		return nil, 0, false, err
	}
	for k, v := range header {
		req.Header[k] = v
	}
	if c.Key != "" {
		req.Header.Set("X-API-Key", c.Key)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	if c.UserAgent != "" {
		req.Header.Set("User-Agent", c.UserAgent)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		fired := !timer.Stop()
		cancel()
		if fired && ctx.Err() == nil {
			err = fmt.Errorf("no answer within %s", c.timeout())
		}
		return nil, 0, true, err
	}
	c.learnLimit(res.Header)
	if res.StatusCode/100 == 2 && stream {
		// From here the timeout is the longest pause between reads.
		timer.Stop()
		res.Body = &idleReader{rc: res.Body, d: c.timeout(), timer: time.AfterFunc(c.timeout(), cancel), cancel: cancel}
		return res, 0, false, nil
	}
	b, err := io.ReadAll(io.LimitReader(res.Body, 256<<20))
	res.Body.Close()
	timer.Stop()
	cancel()
	if err != nil {
		return nil, 0, true, fmt.Errorf("reading the answer: %w", err)
	}
	if res.StatusCode/100 == 2 {
		return &Response{Header: res.Header, Body: b}, 0, false, nil
	}
	ae := &APIError{Method: method, Path: path, Status: res.StatusCode}
	var eb struct {
		Detail any    `json:"detail"`
		Code   string `json:"code"`
	}
	if json.Unmarshal(b, &eb) == nil {
		ae.Code = eb.Code
		switch d := eb.Detail.(type) {
		case string:
			ae.Detail = d
		case nil:
		default:
			j, _ := json.Marshal(d)
			ae.Detail = string(j)
		}
	} else {
		ae.Detail = strings.TrimSpace(string(b[:min(len(b), 200)]))
	}
	ae.RetryAfter = parseRetryAfter(res.Header.Get("Retry-After"), time.Now())
	wait := time.Duration(0)
	if res.StatusCode == http.StatusTooManyRequests || res.StatusCode == http.StatusServiceUnavailable ||
		(res.StatusCode == http.StatusConflict && ae.Code == "idempotency_in_progress") {
		wait = ae.RetryAfter
		if wait == 0 && res.StatusCode != http.StatusServiceUnavailable {
			wait = time.Second // a 429 without Retry-After: one second
		}
	}
	return nil, wait, res.StatusCode >= 500, ae
}

func (c *Client) timeout() time.Duration {
	if c.Timeout > 0 {
		return c.Timeout
	}
	return time.Minute
}

// parseRetryAfter reads Retry-After: whole seconds or an HTTP date.
func parseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if n, err := strconv.Atoi(v); err == nil {
		if n < 0 {
			return 0
		}
		return time.Duration(n) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(t.Sub(now), 0)
	}
	return 0
}

// idleReader cancels its request when no byte arrives for d.
type idleReader struct {
	rc     io.ReadCloser
	d      time.Duration
	timer  *time.Timer
	cancel context.CancelFunc
}

func (r *idleReader) Read(p []byte) (int, error) {
	n, err := r.rc.Read(p)
	if n > 0 {
		r.timer.Reset(r.d)
	}
	return n, err
}

func (r *idleReader) Close() error {
	r.timer.Stop()
	err := r.rc.Close()
	r.cancel()
	return err
}
