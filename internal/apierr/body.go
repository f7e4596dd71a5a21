package apierr

import "errors"

// CodeAccountBusy: 429, the account's own other request bodies being
// received and decoded take its whole share of the server's decoding
// budget (--max-decoding-bytes-per-account); nothing was charged, retry
// after Retry-After (our addition, like server_busy: it is the account's
// own load, so 429 rather than 503).
const CodeAccountBusy = "account_busy"

// Carried returns the *Error a request body's reader failed with, or nil:
// admission control (apiserver/admission.go) refuses a body in the middle
// of a read, with the answer the request must get (408, 429 account_busy,
// 503 server_busy), and that answer must come through whatever decoder
// was reading.
func Carried(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return nil
}
