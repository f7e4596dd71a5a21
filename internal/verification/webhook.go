package verification

// RetryingStatus implements webhook.RetryingAnnouncer: a verification job
// whose every address has a first answer, some of them provisional, is
// partial_complete_retrying (its results may be read), and a webhook hears
// of it (event job.partial_complete_retrying) as well as of completion.
func (f *VerificationFamily) RetryingStatus() string { return StatusRetrying }
