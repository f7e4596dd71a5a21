package verification

// RetryingStatus implements family.RetryingAnnouncer: a verification job
// whose every address has a first answer, some of them provisional, is
// partial_complete_retrying (its results may be read), and a webhook hears
// of it (event job.partial_complete_retrying) as well as of completion.
func (f *Family) RetryingStatus() string { return StatusRetrying }
