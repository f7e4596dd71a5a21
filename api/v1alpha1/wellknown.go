package v1alpha1

// Labels, annotations and the finalizer bulkd puts on the objects it
// manages, and the exit codes of the processor pods (the contract between
// the controller's podFailurePolicy and `bulkd processor`).
const (
	// LabelJobID is on a BulkJob's batch Job and pods: the engine's job id.
	LabelJobID = "bulkd.io/job-id"
	// LabelFamily is on BulkJobs, Jobs and pods: the job family.
	LabelFamily = "bulkd.io/family"
	// LabelRetryRound is on a BulkJob's retry Jobs and their pods: the
	// round (1, 2, ...); shard Jobs do not have it.
	LabelRetryRound = "bulkd.io/retry-round"
	// LabelAccount is on BulkJobs, Jobs and pods: the id of the account
	// that submitted the job (acct_...; an id, never a key or a secret),
	// whose budget and turn its shards take. The API sets it; the
	// controller fills it from the job's data when it is missing.
	LabelAccount = "bulkd.io/account"
	// AnnotationExpiresAt is on BulkJobs: when the job's data expires
	// (RFC 3339), its account's retention if shorter than the
	// deployment's (docs/privacy.md). The controller deletes the BulkJob
	// then, or at its own --retention, whichever comes first.
	AnnotationExpiresAt = "bulkd.io/expires-at"
	// LabelPlan is on BulkJobs, Jobs and pods when the account had an
	// unlimited plan at submission: the plan (starter, standard,
	// professional), which weighs the account's share.
	LabelPlan = "bulkd.io/plan"

	// AdmissionGate is the scheduling gate on processor pods while the
	// controller enforces budgets: a pod is scheduled once the controller
	// admits its shard and removes the gate.
	AdmissionGate = "bulkd.io/admission"
	// KueueQueueLabel names the Kueue LocalQueue of a Job (Kueue mode).
	KueueQueueLabel = "kueue.x-k8s.io/queue-name"

	// LabelName, LabelComponent and LabelManagedBy are the recommended
	// app.kubernetes.io labels.
	LabelName      = "app.kubernetes.io/name"
	LabelComponent = "app.kubernetes.io/component"
	LabelManagedBy = "app.kubernetes.io/managed-by"

	// ManagedByController is LabelManagedBy's value on the Jobs the
	// controller creates (its cache watches only those).
	ManagedByController = "bulkd-controller"
	// ManagedByAPIServer is LabelManagedBy's value on BulkJobs.
	ManagedByAPIServer = "bulkd-apiserver"

	// Finalizer makes deleting a BulkJob delete its data in Redis first.
	Finalizer = "bulkd.io/job-data"

	// ProcessorExitRetry is `bulkd processor`'s exit code for a failure
	// worth retrying (Redis unreachable, a batch that could not be
	// answered, the timeout): the Job retries the index, up to its
	// backoffLimitPerIndex.
	ProcessorExitRetry = 1
	// ProcessorExitJobDataMissing is its exit code when the job's data is
	// not in Redis (expired or deleted): retrying cannot help, so the
	// podFailurePolicy fails the index at once.
	ProcessorExitJobDataMissing = 3
)
