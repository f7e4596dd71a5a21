package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Family is a bulk job family. The CRD checks its form only, not the
// names: adding a family (a package registered in internal/family) must not
// need a CRD upgrade, which Helm's crds/ directory never does. The
// controller and the processor check the name against their family
// registry (a BulkJob of a family the controller does not know is held with
// an UnknownFamily condition).
// +kubebuilder:validation:Pattern=`^[a-z][a-z0-9_]{0,62}$`
type Family string

// FamilyPattern is the form of a family name (the marker above; the
// bulkd.io/family label holds it too, hence at most 63 characters).
const FamilyPattern = `^[a-z][a-z0-9_]{0,62}$`

// Families bulkd registers today (names the tests and the API use; the
// registry, not this list, says what a build knows).
const (
	FamilyCompanyEnrichment Family = "company_enrichment"
	FamilyEmailLookup       Family = "email_lookup"
	FamilyEmailVerification Family = "email_verification"
)

// Metering is how a submission was paid for.
// +kubebuilder:validation:Enum=credits;unlimited_quota
type Metering string

// Meterings.
const (
	MeteringCredits        Metering = "credits"
	MeteringUnlimitedQuota Metering = "unlimited_quota"
)

// BulkJobSpec is an accepted submission as the engine stored it. It refers
// to the inputs in Redis by job id and never carries rows: etcd objects are
// limited to about 1.5 MiB and a submission may hold 100,000 rows.
//
// +kubebuilder:validation:XValidation:rule="self.shards == (self.distinctInputs + self.shardSize - 1) / self.shardSize",message="shards must equal ceil(distinctInputs / shardSize)"
// +kubebuilder:validation:XValidation:rule="self.distinctInputs <= self.rows",message="distinctInputs cannot exceed rows"
type BulkJobSpec struct {
	// Family is the kind of work: which answerer runs the shards.
	Family Family `json:"family"`

	// Metering says whether the job was paid in credits or from an
	// unlimited plan's quota. Informational: the charge is taken before the
	// BulkJob exists and is never refunded afterwards.
	Metering Metering `json:"metering"`

	// OwnerKeyID is the id of the API key that submitted the job (never the
	// key itself). Only that key may read the job.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9_-]+$`
	OwnerKeyID string `json:"ownerKeyID"`

	// JobID is the engine's job uuid: the key of the job's inputs, row map
	// and answers in Redis. It is also the BulkJob's name.
	// +kubebuilder:validation:Pattern=`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`
	JobID string `json:"jobID"`

	// Rows is the number of submitted rows, duplicates and invalid rows
	// included.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100000
	Rows int64 `json:"rows"`

	// DistinctInputs is the number of distinct valid inputs: the work.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100000
	DistinctInputs int64 `json:"distinctInputs"`

	// Shards is the number of shards: the completions of the Indexed Job
	// that runs them, one pod per shard.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100000
	Shards int32 `json:"shards"`

	// ShardSize is the number of distinct inputs per shard (the last shard
	// may hold fewer).
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100000
	ShardSize int32 `json:"shardSize"`

	// Parallelism is how many shards may run at once. The controller caps it
	// with its operator-wide limit and the number of shards.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10000
	Parallelism int32 `json:"parallelism"`
}

// BulkJobPhase is where a BulkJob is in its life.
// +kubebuilder:validation:Enum=Pending;Queued;Running;Retrying;Completed;Failed
type BulkJobPhase string

// Phases. Completed and Failed are terminal.
const (
	// PhasePending: accepted, no shard has started yet.
	PhasePending BulkJobPhase = "Pending"
	// PhaseQueued: the job has work and its Job exists, but no shard of it
	// has been admitted yet: it waits for the processor budget (the
	// controller's --max-running-shards and --max-running-shards-per-account)
	// or, in Kueue mode, for Kueue to admit its Job. QueuePosition is its
	// place in line. The API answers it as running (in_progress).
	PhaseQueued BulkJobPhase = "Queued"
	// PhaseRunning: shards are being processed.
	PhaseRunning BulkJobPhase = "Running"
	// PhaseRetrying: every input has a first answer, and some of those
	// answers are provisional (a greylisted address, say): they wait for a
	// retry, which the controller runs as retry Jobs when they come due.
	// Not finished.
	PhaseRetrying BulkJobPhase = "Retrying"
	// PhaseCompleted: every row is answered (rows of shards that failed for
	// good are answered as the family's error outcome; see the ShardsFailed
	// condition).
	PhaseCompleted BulkJobPhase = "Completed"
	// PhaseFailed: the job cannot be completed, e.g. its data in Redis is
	// gone (expired or deleted).
	PhaseFailed BulkJobPhase = "Failed"
)

// Condition types.
const (
	// ConditionComplete is True when every row is answered.
	ConditionComplete = "Complete"
	// ConditionShardsFailed is True when at least one shard failed for good
	// (its Job index exhausted its retries, or the Job failed): its rows
	// that were still unanswered are answered as the family's error outcome
	// (family.Family's ErrorAnswer), which its message names.
	ConditionShardsFailed = "ShardsFailed"
	// ConditionFailed is True when the BulkJob cannot be completed.
	ConditionFailed = "Failed"
	// ConditionRetryFailed is True when the latest retry Job failed for
	// good (its provisional answers come due again and the next round
	// retries them), False once a later one succeeded.
	ConditionRetryFailed = "RetryFailed"
)

// OutcomeCount is the number of rows answered with one of the family's
// outcomes (company enrichment: found, not_found, error; other families
// name their own).
type OutcomeCount struct {
	// Name is the outcome, as the family names it.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Name string `json:"name"`
	// Rows is the number of rows answered with it (duplicates included).
	// +kubebuilder:validation:Minimum=0
	Rows int64 `json:"rows"`
}

// BulkJobStatus is the observed progress of a BulkJob, folded by the
// controller from its batch Job and the job's counters in Redis. It holds
// counts only, never per-row or per-shard lists.
type BulkJobStatus struct {
	// Phase is a summary of the conditions.
	// +optional
	Phase BulkJobPhase `json:"phase,omitempty"`

	// ProcessedRows is the number of rows answered so far, invalid rows and
	// duplicates included. A provisional answer counts as answered.
	// +optional
	// +kubebuilder:validation:Minimum=0
	ProcessedRows int64 `json:"processedRows,omitempty"`
	// Progress is ProcessedRows as a whole percentage of the rows ("40%";
	// "100%" only once every row has an answer), for kubectl.
	// +optional
	Progress string `json:"progress,omitempty"`
	// Outcomes is the number of rows per outcome, sorted by name; outcomes
	// with no rows are left out.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=64
	Outcomes []OutcomeCount `json:"outcomes,omitempty"`
	// Invalid is the number of rows skipped as invalid at submission.
	// +optional
	// +kubebuilder:validation:Minimum=0
	Invalid int64 `json:"invalid,omitempty"`
	// Retrying is the number of distinct inputs whose answer is provisional
	// and waits for a retry.
	// +optional
	// +kubebuilder:validation:Minimum=0
	Retrying int64 `json:"retrying,omitempty"`
	// RetryRounds is the number of retry Jobs created so far: the latest
	// is named <name>-retry-<retryRounds>.
	// +optional
	// +kubebuilder:validation:Minimum=0
	RetryRounds int32 `json:"retryRounds,omitempty"`
	// NextRetryTime is when the earliest provisional answer is due for its
	// retry (set while Retrying).
	// +optional
	NextRetryTime *metav1.Time `json:"nextRetryTime,omitempty"`

	// ShardsSucceeded is the number of shards whose Job index succeeded.
	// +optional
	// +kubebuilder:validation:Minimum=0
	ShardsSucceeded int32 `json:"shardsSucceeded,omitempty"`
	// ShardsFailed is the number of shards that failed for good.
	// +optional
	// +kubebuilder:validation:Minimum=0
	ShardsFailed int32 `json:"shardsFailed,omitempty"`
	// ShardsActive is the number of shards running now.
	// +optional
	// +kubebuilder:validation:Minimum=0
	ShardsActive int32 `json:"shardsActive,omitempty"`
	// ShardProgress is "done/total" (succeeded plus failed over shards), for
	// kubectl.
	// +optional
	ShardProgress string `json:"shardProgress,omitempty"`
	// QueuePosition is the BulkJob's place in line while it is Queued: 1
	// starts next. It is an estimate across accounts (each account with
	// queued BulkJobs starts its oldest in turn); unset when not Queued,
	// and in Kueue mode (Kueue keeps its own queue).
	// +optional
	// +kubebuilder:validation:Minimum=0
	QueuePosition int32 `json:"queuePosition,omitempty"`

	// Conditions: Complete, ShardsFailed, Failed, RetryFailed.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +patchStrategy=merge
	// +patchMergeKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty" patchStrategy:"merge" patchMergeKey:"type"`

	// ObservedGeneration is the generation the status was computed for.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// StartTime is when the first shard started.
	// +optional
	StartTime *metav1.Time `json:"startTime,omitempty"`
	// CompletionTime is when the BulkJob became Completed or Failed.
	// +optional
	CompletionTime *metav1.Time `json:"completionTime,omitempty"`
}

// BulkJob is one accepted bulk submission (company enrichment, email
// lookup or email verification) run as one Indexed batch Job whose pods
// each process one shard. Its name is the engine's job id.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Namespaced,shortName=bj,categories=bulkd
// +kubebuilder:printcolumn:name="Family",type=string,JSONPath=`.spec.family`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Rows",type=integer,JSONPath=`.spec.rows`
// +kubebuilder:printcolumn:name="Processed",type=integer,JSONPath=`.status.processedRows`
// +kubebuilder:printcolumn:name="Progress",type=string,JSONPath=`.status.progress`,description="processed rows in percent"
// +kubebuilder:printcolumn:name="Shards",type=string,JSONPath=`.status.shardProgress`,description="done/total"
// +kubebuilder:printcolumn:name="Queue",type=integer,JSONPath=`.status.queuePosition`,description="place in line while Queued (1: starts next)"
// +kubebuilder:printcolumn:name="Active",type=integer,JSONPath=`.status.shardsActive`,priority=1
// +kubebuilder:printcolumn:name="Retrying",type=integer,JSONPath=`.status.retrying`,priority=1,description="inputs waiting for a retry"
// +kubebuilder:printcolumn:name="Invalid",type=integer,JSONPath=`.status.invalid`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="self.metadata.name == self.spec.jobID",message="metadata.name must equal spec.jobID"
type BulkJob struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is immutable.
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec is immutable"
	Spec   BulkJobSpec   `json:"spec"`
	Status BulkJobStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// BulkJobList is a list of BulkJobs.
type BulkJobList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []BulkJob `json:"items"`
}

// IsFinished reports whether the phase is terminal.
func (p BulkJobPhase) IsFinished() bool { return p == PhaseCompleted || p == PhaseFailed }

// OutcomeRows is the number of rows answered with the named outcome (0
// when none is).
func (s *BulkJobStatus) OutcomeRows(name string) int64 {
	for _, o := range s.Outcomes {
		if o.Name == name {
			return o.Rows
		}
	}
	return 0
}

func init() {
	SchemeBuilder.Register(&BulkJob{}, &BulkJobList{})
}
