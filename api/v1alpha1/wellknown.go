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
