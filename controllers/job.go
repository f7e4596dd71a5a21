package controllers

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"

	"github.com/bulkd/bulkd/api/v1alpha1"
	"github.com/bulkd/bulkd/internal/accounts"
	"github.com/bulkd/bulkd/internal/batchjob"
	"github.com/bulkd/bulkd/internal/config"
	"github.com/bulkd/bulkd/internal/fairshare"
)

// Options are the operator-wide settings of the processor Jobs (from
// `bulkd controller` flags).
type Options struct {
	// Image, ImagePullPolicy, ServiceAccount and Resources are the
	// processor pods'.
	Image           string
	ImagePullPolicy corev1.PullPolicy
	ServiceAccount  string
	Resources       corev1.ResourceRequirements
	// Command starts the bulkd binary in the image (the container's
	// command; "processor" and its flags are its args). Default ["bulkd"].
	Command []string

	// RedisSecretName and RedisSecretKey name the Secret key holding the
	// Redis URL; pods read it as BULKD_REDIS_URL.
	RedisSecretName string
	RedisSecretKey  string
	// ConfigMapName, when set, is a ConfigMap of BULKD_* settings loaded
	// into the pods' environment (company-enrichment settings: network
	// hosts, redirect checks, proxy, batch size...).
	ConfigMapName string
	// SecretName, when set, is a Secret of BULKD_* settings loaded into
	// the pods' environment after the ConfigMaps (optional, like them):
	// settings that carry credentials, such as BULKD_SMTP_EGRESS with a
	// SOCKS5 proxy's password.
	SecretName string
	// Families are per-family processor settings (--family-profiles); a
	// family without one gets the settings above.
	Families map[v1alpha1.Family]FamilyProfile

	// MaxParallelism caps every BulkJob's parallelism (0: no cap).
	MaxParallelism int32
	// BackoffLimitPerIndex is how many times a failed shard is retried.
	BackoffLimitPerIndex int32
	// MaxFailedShards is how many shards may fail for good before the whole
	// Job is stopped (its remaining shards are then answered as the family's error outcome);
	// 0 means never stop a Job early.
	MaxFailedShards int32
	// JobTTL is how long a finished Job (and its pods) is kept.
	JobTTL time.Duration
	// ProcessorTimeout bounds one processor run (one attempt at one shard).
	ProcessorTimeout time.Duration

	// Retention: BulkJobs older than this are deleted (with their data).
	Retention time.Duration
	// RequeueInterval is how often a running BulkJob is folded again
	// whatever happens: a safety net, since the processors' progress
	// announcements (BulkJobReconciler.Progress) wake it as rows move.
	RequeueInterval time.Duration
	// ProgressInterval is the least time between two status writes of one
	// BulkJob that only report progress, and ProgressWritesPerSecond caps
	// those writes over all BulkJobs (statusWrites); 0 turns either limit
	// off. Phase changes are written at once.
	ProgressInterval        time.Duration
	ProgressWritesPerSecond float64

	// MaxRunningShards is the global budget: processor pods running at
	// once over every BulkJob (0: none). MaxRunningShardsPerAccount is one
	// account's (0: the global one). With either set, the controller
	// admits shards itself (internal/admission): Jobs are created suspended and
	// their pods carry the admission scheduling gate.
	MaxRunningShards           int32
	MaxRunningShardsPerAccount int32
	// NewcomerSlots is the part of the global budget only an account with
	// no shard running may take (internal/admission).
	NewcomerSlots int32
	// PlanWeights weighs an account's turn by its plan (--fair-weights, by
	// plan name; "payg" for a Job without LabelPlan): how many times more
	// rows per turn it gets than an account of weight 1. A plan without a
	// weight weighs 1.
	PlanWeights map[string]int
	// KueueQueueName, when set, hands admission to Kueue: Jobs are created
	// suspended with the kueue.x-k8s.io/queue-name label set to it, where
	// {account}, {plan} and {family} are replaced; the controller then
	// neither gates pods nor un-suspends Jobs, and the budgets above are
	// Kueue's to enforce.
	KueueQueueName string

	// err is a configuration error OptionsFrom found (NewManager reports
	// it).
	err error
}

// Validate reports what OptionsFrom could not read (--family-profiles).
func (o Options) Validate() error { return o.err }

// DefaultOptions returns the defaults: those of `bulkd controller`'s flags.
func DefaultOptions() Options {
	return OptionsFrom(config.DefaultKube(), config.Default().Retention, corev1.ResourceRequirements{})
}

// OptionsFrom maps the controller's configuration (its flags) to Options;
// resources is the parsed --processor-resources. A --family-profiles that
// does not parse is kept as the Options' error: Validate (and NewManager)
// return it.
func OptionsFrom(kc config.Kube, retention time.Duration, resources corev1.ResourceRequirements) Options {
	families, err := ParseFamilyProfiles(kc.FamilyProfiles)
	if err != nil {
		err = fmt.Errorf("--family-profiles: %w", err)
	}
	o := Options{
		Families:             families,
		err:                  err,
		Image:                kc.Image,
		ImagePullPolicy:      corev1.PullPolicy(kc.ImagePullPolicy),
		ServiceAccount:       kc.ServiceAccount,
		Resources:            resources,
		Command:              []string{"bulkd"},
		RedisSecretName:      kc.RedisSecretName,
		RedisSecretKey:       kc.RedisSecretKey,
		ConfigMapName:        kc.ProcessorConfigMap,
		SecretName:           kc.ProcessorSecret,
		MaxParallelism:       int32(kc.ParallelismCap),
		BackoffLimitPerIndex: int32(kc.BackoffLimitPerShard),
		MaxFailedShards:      int32(kc.MaxFailedShards),
		JobTTL:               kc.JobTTL,
		ProcessorTimeout:     kc.ProcessorTimeout,
		Retention:            retention,
		RequeueInterval:      kc.Requeue,
		// Zero is a choice here (no limit), not a value to default.
		ProgressInterval:        kc.ProgressInterval,
		ProgressWritesPerSecond: float64(kc.ProgressWrites),

		MaxRunningShards:           int32(kc.MaxRunningShards),
		MaxRunningShardsPerAccount: int32(kc.MaxRunningShardsPerAccount),
		NewcomerSlots:              int32(kc.NewcomerSlots),
		KueueQueueName:             kc.KueueQueueName,
	}
	if o.NewcomerSlots < 0 {
		// 1% of the budget: 50 of 5,000 slots let 50 new accounts start at
		// once behind a budget one account filled; under 100 slots, none
		// (a small cluster's per-account share does that job).
		o.NewcomerSlots = o.MaxRunningShards / 100
	}
	if o.PlanWeights, err = fairshare.ParseWeights(kc.FairWeights, FairPlans, nil); err != nil && o.err == nil {
		o.err = fmt.Errorf("--fair-weights: %w", err)
	}
	if o.err == nil && o.KueueQueueName != "" {
		// A template that cannot give a valid label value for every
		// account and plan fails at start, not at each BulkJob.
		if _, qerr := kueueQueue(o.KueueQueueName, "acct_0123456789abcdef", "professional", v1alpha1.FamilyEmailVerification); qerr != nil {
			o.err = fmt.Errorf("--kueue-queue-name: %w", qerr)
		}
	}
	return o
}

// FairPlans are the names --fair-weights weighs: payg (no active unlimited
// plan) and the unlimited plans, as in standalone mode.
var FairPlans = []string{"payg", string(accounts.PlanStarter), string(accounts.PlanStandard), string(accounts.PlanProfessional)}

// admits reports whether the controller admits shards against budgets
// (internal/admission): a budget is set and Kueue does not admit instead.
func (o Options) admits() bool {
	return o.KueueQueueName == "" && (o.MaxRunningShards > 0 || o.MaxRunningShardsPerAccount > 0)
}

// kueue reports whether Kueue admits the Jobs.
func (o Options) kueue() bool { return o.KueueQueueName != "" }

// kueueQueue renders the queue-name template for a BulkJob's account,
// plan ("" is "none") and family, with '_' written '-' (acct_x is
// acct-x): LocalQueue names are DNS labels, and so must the result be.
func kueueQueue(tmpl, account, plan string, family v1alpha1.Family) (string, error) {
	if plan == "" {
		plan = "none"
	}
	dns := func(s string) string { return strings.ToLower(strings.ReplaceAll(s, "_", "-")) }
	q := strings.NewReplacer("{account}", dns(account), "{plan}", dns(plan), "{family}", dns(string(family))).Replace(tmpl)
	if q == "" || len(validation.IsDNS1123Label(q)) > 0 {
		return "", fmt.Errorf("queue name %q (from %q) is not a DNS label (lower case letters, digits and '-', at most 63)", q, tmpl)
	}
	return q, nil
}

// withDefaults fills zero values.
func (o Options) withDefaults() Options {
	d := DefaultOptions()
	if len(o.Command) == 0 {
		o.Command = d.Command
	}
	if o.RedisSecretKey == "" {
		o.RedisSecretKey = d.RedisSecretKey
	}
	if o.JobTTL <= 0 {
		o.JobTTL = d.JobTTL
	}
	if o.ProcessorTimeout <= 0 {
		o.ProcessorTimeout = d.ProcessorTimeout
	}
	if o.Retention <= 0 {
		o.Retention = d.Retention
	}
	if o.RequeueInterval <= 0 {
		o.RequeueInterval = d.RequeueInterval
	}
	if o.ImagePullPolicy == "" {
		o.ImagePullPolicy = d.ImagePullPolicy
	}
	return o
}

// completionIndexEnv is what the Job controller calls the index variable.
const completionIndexEnv = "JOB_COMPLETION_INDEX"

// desiredJob is the Indexed Job that runs a BulkJob's shards: index i is
// shard i. Its pods get the family's processor settings. It carries no
// owner reference (the caller sets it).
func desiredJob(bj *v1alpha1.BulkJob, o Options) *batchv1.Job {
	ps := o.forFamily(bj.Spec.Family)
	shards := bj.Spec.Shards
	parallelism := min(bj.Spec.Parallelism, shards)
	if ps.parallelismCap > 0 {
		parallelism = min(parallelism, ps.parallelismCap)
	}
	maxFailed := shards
	if o.MaxFailedShards > 0 {
		maxFailed = min(o.MaxFailedShards, shards)
	}
	labels := jobLabels(bj)
	args := []string{"processor",
		"--job", bj.Spec.JobID,
		"--shard", "$(" + completionIndexEnv + ")",
		"--timeout", o.ProcessorTimeout.String()}
	// Declared explicitly so $(JOB_COMPLETION_INDEX) in the args always
	// resolves.
	index := corev1.EnvVar{Name: completionIndexEnv, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{
		FieldPath: "metadata.annotations['" + batchv1.JobCompletionIndexAnnotation + "']"}}}
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: bj.Name, Namespace: bj.Namespace, Labels: labels},
		Spec: batchv1.JobSpec{
			CompletionMode:       ptr.To(batchv1.IndexedCompletion),
			Completions:          ptr.To(shards),
			Parallelism:          ptr.To(parallelism),
			BackoffLimitPerIndex: ptr.To(o.BackoffLimitPerIndex),
			MaxFailedIndexes:     ptr.To(maxFailed),
			// A pod is replaced only once it has fully terminated, so two
			// pods never work on one shard at once.
			PodReplacementPolicy: ptr.To(batchv1.Failed),
			PodFailurePolicy: &batchv1.PodFailurePolicy{Rules: []batchv1.PodFailurePolicyRule{
				ignoreDisruptions,
				{
					// The job's data is gone: no retry can help.
					Action: batchv1.PodFailurePolicyActionFailIndex,
					OnExitCodes: &batchv1.PodFailurePolicyOnExitCodesRequirement{
						Operator: batchv1.PodFailurePolicyOnExitCodesOpIn, Values: []int32{v1alpha1.ProcessorExitJobDataMissing}},
				},
			}},
			TTLSecondsAfterFinished: ptr.To(int32(o.JobTTL / time.Second)),
			Template:                processorPod(labels, args, []corev1.EnvVar{index}, ps, o),
		},
	}
}

// retryJobName is the name of a BulkJob's retry Job of round n (1, 2, ...).
func retryJobName(bj *v1alpha1.BulkJob, round int32) string {
	return fmt.Sprintf("%s-retry-%d", bj.Name, round)
}

// desiredRetryJob is the Job of a BulkJob's retry round: one pod, with the
// shards' pod template, running `bulkd processor --job ID --retries`, which
// answers every retry due now and exits. A failed pod is retried like a
// shard's; a Job that fails for good leaves its retries to the next round
// (a claimed retry comes due again). No owner reference (the caller sets
// it).
func desiredRetryJob(bj *v1alpha1.BulkJob, o Options, round int32) *batchv1.Job {
	ps := o.forFamily(bj.Spec.Family)
	labels := jobLabels(bj)
	labels[v1alpha1.LabelRetryRound] = strconv.Itoa(int(round))
	args := []string{"processor",
		"--job", bj.Spec.JobID,
		"--retries",
		"--timeout", o.ProcessorTimeout.String()}
	return &batchv1.Job{
		ObjectMeta: metav1.ObjectMeta{Name: retryJobName(bj, round), Namespace: bj.Namespace, Labels: labels},
		Spec: batchv1.JobSpec{
			CompletionMode:       ptr.To(batchv1.NonIndexedCompletion),
			Completions:          ptr.To[int32](1),
			Parallelism:          ptr.To[int32](1),
			BackoffLimit:         ptr.To(o.BackoffLimitPerIndex),
			PodReplacementPolicy: ptr.To(batchv1.Failed),
			PodFailurePolicy: &batchv1.PodFailurePolicy{Rules: []batchv1.PodFailurePolicyRule{
				ignoreDisruptions,
				{
					// The job's data is gone: no retry can help.
					Action: batchv1.PodFailurePolicyActionFailJob,
					OnExitCodes: &batchv1.PodFailurePolicyOnExitCodesRequirement{
						Operator: batchv1.PodFailurePolicyOnExitCodesOpIn, Values: []int32{v1alpha1.ProcessorExitJobDataMissing}},
				},
			}},
			TTLSecondsAfterFinished: ptr.To(int32(o.JobTTL / time.Second)),
			Template:                processorPod(labels, args, nil, ps, o),
		},
	}
}

// ignoreDisruptions: evictions, preemptions, node drains are not the
// processor's fault, and a rerun answers only what is missing.
var ignoreDisruptions = batchv1.PodFailurePolicyRule{
	Action:          batchv1.PodFailurePolicyActionIgnore,
	OnPodConditions: []batchv1.PodFailurePolicyOnPodConditionsPattern{{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue}},
}

// jobLabels are the labels of a BulkJob's Jobs and their pods: with the
// BulkJob's account and plan, whose budget and turn the pods take.
func jobLabels(bj *v1alpha1.BulkJob) map[string]string {
	l := map[string]string{
		v1alpha1.LabelName:      "bulkd",
		v1alpha1.LabelComponent: "processor",
		v1alpha1.LabelManagedBy: v1alpha1.ManagedByController,
		v1alpha1.LabelJobID:     bj.Spec.JobID,
		v1alpha1.LabelFamily:    string(bj.Spec.Family),
	}
	for _, k := range []string{v1alpha1.LabelAccount, v1alpha1.LabelPlan} {
		if v := bj.Labels[k]; v != "" && len(validation.IsValidLabelValue(v)) == 0 {
			l[k] = v
		}
	}
	return l
}

// admissionControl makes a new Job wait for its admission: created
// suspended (no pod at all until admitted), and, when the controller
// admits, its pods carry the admission gate, so each one is scheduled only
// once its shard is admitted; in Kueue mode it carries its queue's label
// and Kueue un-suspends it.
func admissionControl(job *batchv1.Job, bj *v1alpha1.BulkJob, o Options) error {
	switch {
	case o.kueue():
		q, err := kueueQueue(o.KueueQueueName, bj.Labels[v1alpha1.LabelAccount], bj.Labels[v1alpha1.LabelPlan], bj.Spec.Family)
		if err != nil {
			return err
		}
		job.Labels[v1alpha1.KueueQueueLabel] = q
		job.Spec.Suspend = ptr.To(true)
	case o.admits():
		job.Spec.Suspend = ptr.To(true)
		job.Spec.Template.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: v1alpha1.AdmissionGate}}
	}
	return nil
}

// processorPod is the pod template of a processor: `bulkd` with args,
// the Redis URL from its Secret, the family's settings (ps) and first the
// extra variables.
func processorPod(labels map[string]string, args []string, first []corev1.EnvVar, ps processorSettings, o Options) corev1.PodTemplateSpec {
	env := append(slices.Clone(first), corev1.EnvVar{Name: "BULKD_REDIS_URL", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
		LocalObjectReference: corev1.LocalObjectReference{Name: o.RedisSecretName}, Key: o.RedisSecretKey}}})
	env = append(env, ps.env...)
	var envFrom []corev1.EnvFromSource
	for _, cm := range ps.configMaps {
		envFrom = append(envFrom, corev1.EnvFromSource{ConfigMapRef: &corev1.ConfigMapEnvSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: cm}, Optional: ptr.To(true)}})
	}
	if o.SecretName != "" {
		envFrom = append(envFrom, corev1.EnvFromSource{SecretRef: &corev1.SecretEnvSource{
			LocalObjectReference: corev1.LocalObjectReference{Name: o.SecretName}, Optional: ptr.To(true)}})
	}
	return corev1.PodTemplateSpec{
		ObjectMeta: metav1.ObjectMeta{Labels: maps.Clone(labels)},
		Spec: corev1.PodSpec{
			RestartPolicy:                corev1.RestartPolicyNever,
			ServiceAccountName:           o.ServiceAccount,
			AutomountServiceAccountToken: ptr.To(false), // processors never call the Kubernetes API
			EnableServiceLinks:           ptr.To(false),
			NodeSelector:                 ps.nodeSelector,
			Tolerations:                  ps.tolerations,
			HostNetwork:                  ps.hostNetwork,
			DNSPolicy:                    ps.dnsPolicy,
			SecurityContext: &corev1.PodSecurityContext{
				RunAsNonRoot:   ptr.To(true),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
			Containers: []corev1.Container{{
				Name:            "processor",
				Image:           o.Image,
				ImagePullPolicy: o.ImagePullPolicy,
				Command:         slices.Clone(o.Command),
				Args:            args,
				Env:             env,
				EnvFrom:         envFrom,
				Resources:       ps.resources,
				SecurityContext: &corev1.SecurityContext{
					AllowPrivilegeEscalation: ptr.To(false),
					ReadOnlyRootFilesystem:   ptr.To(true),
					Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
				},
				TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
			}},
		},
	}
}

// shardOutcomes reads which shards a Job has settled: succeeded (its
// completedIndexes) and failed for good (its failedIndexes, and once the
// Job has finished, every index it did not complete).
func shardOutcomes(job *batchv1.Job, shards int32) (succeeded, failed map[int32]bool, err error) {
	if succeeded, err = batchjob.ParseIndexes(job.Status.CompletedIndexes, shards); err != nil {
		return nil, nil, err
	}
	failed = map[int32]bool{}
	if job.Status.FailedIndexes != nil {
		if failed, err = batchjob.ParseIndexes(*job.Status.FailedIndexes, shards); err != nil {
			return nil, nil, err
		}
	}
	if batchjob.Finished(job) {
		for i := int32(0); i < shards; i++ {
			if !succeeded[i] {
				failed[i] = true
			}
		}
	}
	return succeeded, failed, nil
}
