// Package companyapi is a test client of bulkd's company-enrichment bulk
// API, shared by the suites that drive a whole bulkd over HTTP (test/kube on
// envtest, test/cluster on a real cluster).
package companyapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"
)

// BulkPath is the bulk submission path.
const BulkPath = "/v1/company-enrichment/bulk"

// Row is a submitted row.
type Row struct {
	NetworkURL *string `json:"network_url,omitempty"`
	Domain     *string `json:"domain,omitempty"`
}

// NetworkURL is a row submitted by network URL.
func NetworkURL(s string) Row { return Row{NetworkURL: &s} }

// Domain is a row submitted by domain.
func Domain(s string) Row { return Row{Domain: &s} }

// Company is the network URL of test company n.
func Company(n int) Row {
	return NetworkURL(fmt.Sprintf("https://www.linkedin.com/company/co-%02d", n))
}

var httpc = &http.Client{Timeout: 120 * time.Second}

// Client is an HTTP client of one bulkd API.
type Client struct {
	T   testing.TB
	URL string
}

// Do sends body (JSON) with key and returns the status and body.
func (c Client) Do(method, path, key string, body any) (int, []byte) {
	c.T.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			c.T.Fatal(err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, c.URL+path, rd)
	if err != nil {
		c.T.Fatal(err)
	}
	req.Header.Set("X-API-Key", key)
	req.Header.Set("Content-Type", "application/json")
	res, err := httpc.Do(req)
	if err != nil {
		c.T.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, b
}

// Submitted is the submission answer.
type Submitted struct {
	JobID           string  `json:"job_id"`
	Status          string  `json:"status"`
	TotalRows       int64   `json:"total_rows"`
	TotalInvalid    int64   `json:"total_invalid"`
	CreditsConsumed float64 `json:"credits_consumed"`
}

// Submit posts rows and fails the test unless they are accepted.
func (c Client) Submit(key string, rows []Row) Submitted {
	c.T.Helper()
	code, b := c.Do(http.MethodPost, BulkPath, key, map[string]any{"input": rows})
	if code != http.StatusOK {
		c.T.Fatalf("submit: %d %s", code, b)
	}
	var s Submitted
	if err := json.Unmarshal(b, &s); err != nil {
		c.T.Fatal(err)
	}
	return s
}

// JobStatus is the status answer.
type JobStatus struct {
	JobID           string           `json:"job_id"`
	Status          string           `json:"status"`
	TotalRows       int64            `json:"total_rows"`
	TotalProcessed  int64            `json:"total_processed"`
	TotalInvalid    int64            `json:"total_invalid"`
	TotalDistinct   int64            `json:"total_distinct"`
	CreditsConsumed float64          `json:"credits_consumed"`
	Summary         map[string]int64 `json:"summary"`
	CreatedAt       time.Time        `json:"created_at"`
	CompletedAt     *time.Time       `json:"completed_at"`
}

// Status reads a job's status; the body is decoded only on 200.
func (c Client) Status(key, id string) (int, JobStatus) {
	c.T.Helper()
	code, b := c.Do(http.MethodGet, BulkPath+"/"+id, key, nil)
	var s JobStatus
	if code == http.StatusOK {
		if err := json.Unmarshal(b, &s); err != nil {
			c.T.Fatal(err)
		}
	}
	return code, s
}

// Wait polls the job status until it is completed, or fails after d.
func (c Client) Wait(key, id string, d time.Duration) JobStatus {
	c.T.Helper()
	deadline := time.Now().Add(d)
	for {
		code, s := c.Status(key, id)
		if code == http.StatusOK && s.Status == "completed" {
			return s
		}
		if time.Now().After(deadline) {
			c.T.Fatalf("job %s not completed after %v: %d %+v", id, d, code, s)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Results reads every result row, page by page.
func (c Client) Results(key, id string) []map[string]any {
	c.T.Helper()
	var all []map[string]any
	for offset := 0; ; offset += 500 {
		code, b := c.Do(http.MethodGet, fmt.Sprintf("%s/%s/results?limit=500&offset=%d", BulkPath, id, offset), key, nil)
		if code != http.StatusOK {
			c.T.Fatalf("results: %d %s", code, b)
		}
		var page struct {
			TotalRows int              `json:"total_rows"`
			Results   []map[string]any `json:"results"`
		}
		if err := json.Unmarshal(b, &page); err != nil {
			c.T.Fatal(err)
		}
		all = append(all, page.Results...)
		if offset+500 >= page.TotalRows {
			return all
		}
	}
}
