package verify

import "time"

// Statuses.
const (
	StatusDeliverable   = "deliverable"
	StatusUndeliverable = "undeliverable"
	StatusRisky         = "risky"
	StatusUnknown       = "unknown"
)

// Reasons, by status (see doc.go for when each is given).
const (
	ReasonAccepted = "accepted"

	ReasonInvalidSyntax   = "invalid_syntax"
	ReasonNoSuchDomain    = "no_such_domain"
	ReasonNullMX          = "null_mx"
	ReasonNoMailServer    = "no_mail_server"
	ReasonMailboxNotFound = "mailbox_not_found"
	ReasonMailboxDisabled = "mailbox_disabled"
	ReasonRejected        = "rejected"

	ReasonCatchAll    = "catch_all"
	ReasonMailboxFull = "mailbox_full"
	ReasonDisposable  = "disposable"

	ReasonGreylisted       = "greylisted"
	ReasonDNSError         = "dns_error"
	ReasonConnectionFailed = "connection_failed"
	ReasonTimeout          = "timeout"
	ReasonTemporaryFailure = "temporary_failure"
	ReasonRateLimited      = "rate_limited"
	ReasonSMTPError        = "smtp_error"
	// ReasonBlocked: the server refused us, the client (our IP on a DNSBL,
	// poor reputation, no PTR, ...), not the address (see isClientBlock).
	ReasonBlocked = "blocked"
)

// StatusOf returns the status a reason belongs to ("" for an unknown reason).
func StatusOf(reason string) string {
	switch reason {
	case ReasonAccepted:
		return StatusDeliverable
	case ReasonInvalidSyntax, ReasonNoSuchDomain, ReasonNullMX, ReasonNoMailServer,
		ReasonMailboxNotFound, ReasonMailboxDisabled, ReasonRejected:
		return StatusUndeliverable
	case ReasonCatchAll, ReasonMailboxFull, ReasonDisposable:
		return StatusRisky
	case ReasonGreylisted, ReasonDNSError, ReasonConnectionFailed, ReasonTimeout,
		ReasonTemporaryFailure, ReasonRateLimited, ReasonSMTPError, ReasonBlocked:
		return StatusUnknown
	}
	return ""
}

// Result is the verdict on one address.
type Result struct {
	// Email is the normalized address, or the trimmed input when its syntax
	// is invalid.
	Email        string  `json:"email"`
	Status       string  `json:"status"`
	Reason       string  `json:"reason"`
	ValidSyntax  bool    `json:"is_valid_syntax"`
	Domain       *string `json:"domain"`
	MXHost       *string `json:"mx_host"`
	Provider     *string `json:"provider"`
	IsCatchAll   bool    `json:"is_catch_all"`
	IsDisposable bool    `json:"is_disposable"`
	IsRole       bool    `json:"is_role"`
	IsFree       bool    `json:"is_free"`
	IsDisabled   bool    `json:"is_disabled"`
	HasFullInbox bool    `json:"has_full_inbox"`
	Suggestion   *string `json:"suggestion"`
	Score        int     `json:"score"`
	// SMTPCode is the reply code of the last RCPT TO for this address (or
	// of the command that ended its session, e.g. 421); 0 when no SMTP
	// conversation reached it.
	SMTPCode  int       `json:"smtp_code,omitempty"`
	CheckedAt time.Time `json:"checked_at"`
	// Temporary marks an answer that may change on a later attempt;
	// RetryAfter suggests when to try again.
	Temporary  bool          `json:"-"`
	RetryAfter time.Duration `json:"-"`
}

// Score returns the score of a result from its reason and flags: see the
// table in doc.go.
func Score(r *Result) int {
	switch r.Reason {
	case ReasonAccepted:
		s := 95
		if r.IsRole {
			s -= 10
		}
		if r.IsFree {
			s -= 5
		}
		return s
	case ReasonCatchAll:
		if r.IsRole {
			return 40
		}
		return 50
	case ReasonMailboxFull:
		return 30
	case ReasonDisposable:
		return 20
	case ReasonGreylisted:
		return 30
	case ReasonTemporaryFailure, ReasonRateLimited, ReasonBlocked:
		return 25
	case ReasonSMTPError:
		return 20
	case ReasonTimeout:
		return 15
	case ReasonConnectionFailed, ReasonDNSError:
		return 10
	}
	return 0
}
