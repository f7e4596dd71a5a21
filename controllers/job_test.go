package controllers

import (
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/bulkd/bulkd/api/v1alpha1"
	"github.com/bulkd/bulkd/internal/batchjob"
	"github.com/bulkd/bulkd/internal/config"
	"github.com/bulkd/bulkd/internal/family"
	"github.com/bulkd/bulkd/internal/jobs"
	"github.com/bulkd/bulkd/test/builders"
)

func TestDesiredJob(t *testing.T) {
	o := DefaultOptions()
	o.Image, o.ServiceAccount, o.ConfigMapName = "registry.example/bulkd:1.2.3", "bulkd-processor", "bulkd-config"
	o.MaxParallelism, o.MaxFailedShards, o.BackoffLimitPerIndex = 3, 2, 4
	o.ProcessorTimeout = 5 * time.Minute
	bj := builders.MakeBulkJob("0c6d7e7e-1111-4222-8333-944445555666", "bulkd").Rows(50, 50).Shards(5, 10).Parallelism(8).Obj()
	job := desiredJob(bj, o.withDefaults())

	s := job.Spec
	if *s.CompletionMode != batchv1.IndexedCompletion || *s.Completions != 5 {
		t.Fatalf("want an Indexed Job of 5 completions: %+v", s)
	}
	if *s.Parallelism != 3 {
		t.Fatalf("parallelism %d: want min(spec 8, cap 3, shards 5) = 3", *s.Parallelism)
	}
	if *s.BackoffLimitPerIndex != 4 || *s.MaxFailedIndexes != 2 || *s.TTLSecondsAfterFinished != 3600 || *s.PodReplacementPolicy != batchv1.Failed {
		t.Fatalf("retry settings: %+v", s)
	}
	rules := s.PodFailurePolicy.Rules
	if len(rules) != 2 || rules[0].Action != batchv1.PodFailurePolicyActionIgnore || rules[0].OnPodConditions[0].Type != corev1.DisruptionTarget ||
		rules[1].Action != batchv1.PodFailurePolicyActionFailIndex || !slices.Equal(rules[1].OnExitCodes.Values, []int32{v1alpha1.ProcessorExitJobDataMissing}) {
		t.Fatalf("podFailurePolicy: %+v", rules)
	}
	pod := s.Template.Spec
	if pod.RestartPolicy != corev1.RestartPolicyNever || pod.ServiceAccountName != "bulkd-processor" || *pod.AutomountServiceAccountToken {
		t.Fatalf("pod: %+v", pod)
	}
	c := pod.Containers[0]
	if c.Image != o.Image || c.ImagePullPolicy != corev1.PullIfNotPresent {
		t.Fatalf("container: %+v", c)
	}
	cmd := append(slices.Clone(c.Command), c.Args...)
	want := []string{"bulkd", "processor", "--job", bj.Spec.JobID, "--shard", "$(JOB_COMPLETION_INDEX)", "--timeout", "5m0s"}
	if !slices.Equal(cmd, want) {
		t.Fatalf("command %q, want %q", cmd, want)
	}
	env := map[string]corev1.EnvVar{}
	for _, e := range c.Env {
		env[e.Name] = e
	}
	if r := env["BULKD_REDIS_URL"].ValueFrom.SecretKeyRef; r == nil || r.Name != "bulkd-redis" || r.Key != "redis-url" {
		t.Fatalf("redis url must come from the Secret: %+v", env["BULKD_REDIS_URL"])
	}
	if f := env["JOB_COMPLETION_INDEX"].ValueFrom.FieldRef; f == nil || f.FieldPath != "metadata.annotations['batch.kubernetes.io/job-completion-index']" {
		t.Fatalf("completion index env: %+v", env["JOB_COMPLETION_INDEX"])
	}
	if len(c.EnvFrom) != 1 || c.EnvFrom[0].ConfigMapRef.Name != "bulkd-config" || !*c.EnvFrom[0].ConfigMapRef.Optional {
		t.Fatalf("envFrom: %+v", c.EnvFrom)
	}
	if job.Labels[v1alpha1.LabelJobID] != bj.Spec.JobID || job.Labels[v1alpha1.LabelManagedBy] != v1alpha1.ManagedByController ||
		!reflect.DeepEqual(job.Labels, s.Template.Labels) {
		t.Fatalf("labels: %v / %v", job.Labels, s.Template.Labels)
	}
	// The processor Secret (settings with credentials: an SMTP egress's
	// proxy) comes after the ConfigMaps, optional like them.
	o.SecretName = "bulkd-processor-secret"
	sc := desiredJob(bj, o.withDefaults()).Spec.Template.Spec.Containers[0]
	if len(sc.EnvFrom) != 2 || sc.EnvFrom[1].SecretRef == nil || sc.EnvFrom[1].SecretRef.Name != "bulkd-processor-secret" || !*sc.EnvFrom[1].SecretRef.Optional {
		t.Fatalf("envFrom with the processor Secret: %+v", sc.EnvFrom)
	}
	if *c.SecurityContext.AllowPrivilegeEscalation || !*pod.SecurityContext.RunAsNonRoot {
		t.Fatal("processor pods must meet the restricted pod security standard")
	}

	// No cap and no failure limit: parallelism is capped by the shards,
	// and a Job is never stopped early.
	o.MaxParallelism, o.MaxFailedShards = 0, 0
	job = desiredJob(bj, o.withDefaults())
	if *job.Spec.Parallelism != 5 || *job.Spec.MaxFailedIndexes != 5 {
		t.Fatalf("parallelism %d, maxFailedIndexes %d: want 5, 5", *job.Spec.Parallelism, *job.Spec.MaxFailedIndexes)
	}
}

func TestParseIndexes(t *testing.T) {
	for _, c := range []struct {
		in   string
		n    int32
		want []int32
		bad  bool
	}{
		{"", 5, nil, false},
		{"0", 5, []int32{0}, false},
		{"0-2,4", 5, []int32{0, 1, 2, 4}, false},
		{"1,3-4,7", 5, []int32{1, 3, 4}, false}, // past completions: ignored
		{"x", 5, nil, true},
		{"3-1", 5, nil, true},
	} {
		got, err := batchjob.ParseIndexes(c.in, c.n)
		if (err != nil) != c.bad {
			t.Fatalf("%q: err %v", c.in, err)
		}
		var keys []int32
		for k := range got {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		if !slices.Equal(keys, c.want) {
			t.Fatalf("%q: %v, want %v", c.in, keys, c.want)
		}
	}
}

func TestShardOutcomes(t *testing.T) {
	cases := []struct {
		name          string
		job           *batchv1.Job
		succeeded     int
		failed        []int32
		expectFinsish bool
	}{
		{"running", builders.MakeJob("j", "ns", 4).CompletedIndexes("0,2", 2).Active(2).Obj(), 2, nil, false},
		{"an index failed for good while others run", builders.MakeJob("j", "ns", 4).CompletedIndexes("0", 1).FailedIndexes("2").Obj(), 1, []int32{2}, false},
		{"finished with failed indexes", builders.MakeJob("j", "ns", 4).CompletedIndexes("0,1,3", 3).FailedIndexes("2").
			Condition(batchv1.JobFailureTarget, batchv1.JobReasonFailedIndexes).Condition(batchv1.JobFailed, batchv1.JobReasonFailedIndexes).Obj(), 3, []int32{2}, true},
		{"stopped early: every index not completed failed", builders.MakeJob("j", "ns", 4).CompletedIndexes("0", 1).FailedIndexes("1-2").
			Condition(batchv1.JobFailed, batchv1.JobReasonMaxFailedIndexesExceeded).Obj(), 1, []int32{1, 2, 3}, true},
		{"complete", builders.MakeJob("j", "ns", 4).CompletedIndexes("0-3", 4).
			Condition(batchv1.JobSuccessCriteriaMet, batchv1.JobReasonCompletionsReached).Condition(batchv1.JobComplete, batchv1.JobReasonCompletionsReached).Obj(), 4, nil, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ok, bad, err := shardOutcomes(c.job, 4)
			if err != nil {
				t.Fatal(err)
			}
			var keys []int32
			for k := range bad {
				keys = append(keys, k)
			}
			slices.Sort(keys)
			if len(ok) != c.succeeded || !slices.Equal(keys, c.failed) || batchjob.Finished(c.job) != c.expectFinsish {
				t.Fatalf("succeeded %v failed %v finished %v", ok, keys, batchjob.Finished(c.job))
			}
		})
	}
}

// Each family's Jobs get its own processor settings; a family without a
// profile gets the operator-wide ones.
func TestDesiredJobFamilyProfiles(t *testing.T) {
	o := DefaultOptions()
	o.Image, o.ConfigMapName, o.MaxParallelism = "registry.example/bulkd:1.2.3", "bulkd-config", 32
	o.Resources = corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m")}}
	var err error
	o.Families, err = ParseFamilyProfiles(`{"email_verification":{"parallelismCap":4,"resources":{"requests":{"cpu":"100m"},"limits":{"memory":"512Mi"}},
		"configMap":"bulkd-verify-egress","env":{"BULKD_SMTP_HELO":"verify.example.com","BULKD_SMTP_MAIL_FROM":"probe@verify.example.com"},
		"nodeSelector":{"bulkd.io/egress":"smtp"},"tolerations":[{"key":"bulkd.io/egress","operator":"Equal","value":"smtp","effect":"NoSchedule"}]}}`)
	if err != nil {
		t.Fatal(err)
	}
	const id = "0c6d7e7e-1111-4222-8333-944445555666"
	company := desiredJob(builders.MakeBulkJob(id, "bulkd").Rows(100, 100).Shards(10, 10).Parallelism(8).Obj(), o.withDefaults())
	verify := desiredJob(builders.MakeBulkJob(id, "bulkd").Family(v1alpha1.FamilyEmailVerification).Rows(100, 100).Shards(10, 10).Parallelism(8).Obj(), o.withDefaults())

	// company_enrichment: no profile.
	pod, c := company.Spec.Template.Spec, company.Spec.Template.Spec.Containers[0]
	if *company.Spec.Parallelism != 8 || c.Resources.Requests.Cpu().String() != "250m" || len(c.EnvFrom) != 1 ||
		len(pod.NodeSelector) != 0 || len(pod.Tolerations) != 0 || len(c.Env) != 2 || company.Labels[v1alpha1.LabelFamily] != "company_enrichment" {
		t.Fatalf("company Job: parallelism %d, pod %+v", *company.Spec.Parallelism, pod)
	}
	// email_verification: min(spec 8, family cap 4, global cap 32), its
	// resources, its ConfigMap after the shared one, its env, its nodes.
	pod, c = verify.Spec.Template.Spec, verify.Spec.Template.Spec.Containers[0]
	if *verify.Spec.Parallelism != 4 {
		t.Fatalf("parallelism %d, want 4", *verify.Spec.Parallelism)
	}
	if c.Resources.Requests.Cpu().String() != "100m" || c.Resources.Limits.Memory().String() != "512Mi" {
		t.Fatalf("resources %+v", c.Resources)
	}
	if len(c.EnvFrom) != 2 || c.EnvFrom[0].ConfigMapRef.Name != "bulkd-config" || c.EnvFrom[1].ConfigMapRef.Name != "bulkd-verify-egress" {
		t.Fatalf("envFrom %+v", c.EnvFrom)
	}
	var names []string
	for _, e := range c.Env {
		names = append(names, e.Name)
	}
	if !slices.Equal(names, []string{"JOB_COMPLETION_INDEX", "BULKD_REDIS_URL", "BULKD_SMTP_HELO", "BULKD_SMTP_MAIL_FROM"}) || c.Env[2].Value != "verify.example.com" {
		t.Fatalf("env %+v", c.Env)
	}
	if pod.NodeSelector["bulkd.io/egress"] != "smtp" || len(pod.Tolerations) != 1 || pod.Tolerations[0].Effect != corev1.TaintEffectNoSchedule {
		t.Fatalf("placement: %v %+v", pod.NodeSelector, pod.Tolerations)
	}
	if verify.Labels[v1alpha1.LabelFamily] != "email_verification" || verify.Spec.Template.Labels[v1alpha1.LabelFamily] != "email_verification" {
		t.Fatalf("labels %v", verify.Labels)
	}
	// The operator-wide cap still applies when it is the lower one.
	o.MaxParallelism = 3
	if j := desiredJob(builders.MakeBulkJob(id, "bulkd").Family(v1alpha1.FamilyEmailVerification).Rows(100, 100).Shards(10, 10).Parallelism(8).Obj(), o.withDefaults()); *j.Spec.Parallelism != 3 {
		t.Fatalf("parallelism %d, want the global cap 3", *j.Spec.Parallelism)
	}
}

// hostNetwork: the family's shard and retry pods run in the node's network
// namespace (its egress IP; the e2e cluster's mail world on the node's
// loopback) and still resolve cluster names; other families' pods do not.
func TestDesiredJobHostNetwork(t *testing.T) {
	o := DefaultOptions()
	var err error
	o.Families, err = ParseFamilyProfiles(`{"email_verification":{"hostNetwork":true,"parallelismCap":2,"configMap":"bulkd-verify-e2e"}}`)
	if err != nil {
		t.Fatal(err)
	}
	const id = "0c6d7e7e-1111-4222-8333-944445555666"
	verify := builders.MakeBulkJob(id, "bulkd").Family(v1alpha1.FamilyEmailVerification).Rows(100, 100).Shards(2, 50).Parallelism(4).Obj()
	for _, job := range []*batchv1.Job{desiredJob(verify, o.withDefaults()), desiredRetryJob(verify, o.withDefaults(), 1)} {
		pod := job.Spec.Template.Spec
		if !pod.HostNetwork || pod.DNSPolicy != corev1.DNSClusterFirstWithHostNet {
			t.Errorf("Job %s: hostNetwork %v dnsPolicy %q, want true and ClusterFirstWithHostNet", job.Name, pod.HostNetwork, pod.DNSPolicy)
		}
		if sc := pod.Containers[0].SecurityContext; *sc.AllowPrivilegeEscalation || !*pod.SecurityContext.RunAsNonRoot || len(pod.Containers[0].Ports) != 0 {
			t.Errorf("Job %s: the pod must stay non-root without privilege escalation and listen on no port: %+v", job.Name, pod)
		}
	}
	if j := desiredJob(verify, o.withDefaults()); *j.Spec.Parallelism != 2 {
		t.Errorf("parallelism %d, want the family cap 2", *j.Spec.Parallelism)
	}
	// No profile, or a profile without it: the pod network and the API
	// server's default DNS policy.
	company := desiredJob(builders.MakeBulkJob(id, "bulkd").Rows(100, 100).Shards(2, 50).Obj(), o.withDefaults())
	o.Families[v1alpha1.FamilyEmailVerification] = FamilyProfile{ParallelismCap: 2}
	plain := desiredJob(verify, o.withDefaults())
	for _, job := range []*batchv1.Job{company, plain} {
		if pod := job.Spec.Template.Spec; pod.HostNetwork || pod.DNSPolicy != "" {
			t.Errorf("Job %s (%s): hostNetwork %v dnsPolicy %q", job.Name, job.Labels[v1alpha1.LabelFamily], pod.HostNetwork, pod.DNSPolicy)
		}
	}
	if _, err := ParseFamilyProfiles(`{"email_verification":{"hostNetwork":"yes"}}`); err == nil || !strings.Contains(err.Error(), "email_verification") {
		t.Errorf("hostNetwork must be a boolean: %v", err)
	}
}

func TestParseFamilyProfiles(t *testing.T) {
	if p, err := ParseFamilyProfiles(" "); err != nil || p != nil {
		t.Fatalf("empty: %v %v", p, err)
	}
	p, err := ParseFamilyProfiles(`{"email_verification":{"env":{"BULKD_SMTP_HELO":"h"}},"company_enrichment":{}}`)
	if err != nil || len(p) != 2 || p[v1alpha1.FamilyEmailVerification].Env["BULKD_SMTP_HELO"] != "h" {
		t.Fatalf("%+v %v", p, err)
	}
	for _, c := range []struct{ in, want string }{
		{`[]`, "JSON object"},
		{`{"People Search":{}}`, "not a family name"},
		{`{"email_verification":{"parallelismcap":4}}`, "parallelismcap"},
		{`{"email_verification":{"parallelismCap":-1}}`, "negative"},
		{`{"email_verification":{"resources":{"requests":{"cpu":"lots"}}}}`, "email_verification"},
		{`{"email_verification":{"env":{"BULKD_REDIS_URL":"redis://x"}}}`, "set by the controller"},
		{`{"email_verification":{"env":{"1X":"y"}}}`, "1X"},
		{`{"email_verification":{"configMap":"Not_A_Name"}}`, "configMap"},
		{`{"email_verification":{"nodeSelector":{"a b":"c"}}}`, "nodeSelector"},
	} {
		if _, err := ParseFamilyProfiles(c.in); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one mentioning %q", c.in, err, c.want)
		}
	}
	// OptionsFrom keeps the error for NewManager.
	kc := config.DefaultKube()
	kc.FamilyProfiles = `{"People Search":{}}`
	if err := OptionsFrom(kc, time.Hour, corev1.ResourceRequirements{}).Validate(); err == nil || !strings.Contains(err.Error(), "--family-profiles") {
		t.Fatalf("Validate: %v", err)
	}
	// A well-formed name parses; the registry decides whether it is known
	// (NewManager checks it against the shard failer's families).
	p, err = ParseFamilyProfiles(`{"people_search":{}}`)
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckFamilyProfiles(p, families.Names()); err == nil || !strings.Contains(err.Error(), `unknown family "people_search"`) {
		t.Fatalf("CheckFamilyProfiles: %v", err)
	}
	if err := CheckFamilyProfiles(map[v1alpha1.Family]FamilyProfile{v1alpha1.FamilyEmailLookup: {}}, families.Names()); err != nil {
		t.Fatal(err)
	}
	// The registry refuses a name the CRD would (one pattern, two packages:
	// the API types do not import the families).
	if v1alpha1.FamilyPattern != family.NamePattern {
		t.Fatalf("CRD family pattern %s, registry's %s", v1alpha1.FamilyPattern, family.NamePattern)
	}
}

func TestDesiredRetryJob(t *testing.T) {
	o := DefaultOptions()
	o.Image, o.ConfigMapName, o.BackoffLimitPerIndex, o.ProcessorTimeout = "registry.example/bulkd:1.2.3", "bulkd-config", 4, 5*time.Minute
	o.Families = map[v1alpha1.Family]FamilyProfile{v1alpha1.FamilyEmailVerification: {ConfigMap: "bulkd-verify-egress",
		NodeSelector: map[string]string{"bulkd.io/egress": "smtp"}}}
	bj := builders.MakeBulkJob("0c6d7e7e-1111-4222-8333-944445555666", "bulkd").Family(v1alpha1.FamilyEmailVerification).Obj()
	job := desiredRetryJob(bj, o.withDefaults(), 3)
	s := job.Spec
	if job.Name != bj.Name+"-retry-3" || *s.CompletionMode != batchv1.NonIndexedCompletion || *s.Completions != 1 || *s.Parallelism != 1 ||
		*s.BackoffLimit != 4 || s.BackoffLimitPerIndex != nil || *s.TTLSecondsAfterFinished != 3600 || *s.PodReplacementPolicy != batchv1.Failed {
		t.Fatalf("retry Job %s: %+v", job.Name, s)
	}
	rules := s.PodFailurePolicy.Rules
	if len(rules) != 2 || rules[0].Action != batchv1.PodFailurePolicyActionIgnore ||
		rules[1].Action != batchv1.PodFailurePolicyActionFailJob || !slices.Equal(rules[1].OnExitCodes.Values, []int32{v1alpha1.ProcessorExitJobDataMissing}) {
		t.Fatalf("podFailurePolicy %+v", rules)
	}
	c := s.Template.Spec.Containers[0]
	cmd := append(slices.Clone(c.Command), c.Args...)
	if want := []string{"bulkd", "processor", "--job", bj.Spec.JobID, "--retries", "--timeout", "5m0s"}; !slices.Equal(cmd, want) {
		t.Fatalf("command %q, want %q", cmd, want)
	}
	if len(c.Env) != 1 || c.Env[0].Name != "BULKD_REDIS_URL" || len(c.EnvFrom) != 2 || s.Template.Spec.NodeSelector["bulkd.io/egress"] != "smtp" {
		t.Fatalf("pod: env %+v envFrom %+v nodeSelector %v", c.Env, c.EnvFrom, s.Template.Spec.NodeSelector)
	}
	if job.Labels[v1alpha1.LabelRetryRound] != "3" || job.Labels[v1alpha1.LabelFamily] != "email_verification" ||
		job.Labels[v1alpha1.LabelManagedBy] != v1alpha1.ManagedByController || !reflect.DeepEqual(job.Labels, s.Template.Labels) {
		t.Fatalf("labels %v / %v", job.Labels, s.Template.Labels)
	}
	if s.Template.Spec.RestartPolicy != corev1.RestartPolicyNever || *s.Template.Spec.AutomountServiceAccountToken {
		t.Fatalf("pod %+v", s.Template.Spec)
	}
}

func TestDecideRetry(t *testing.T) {
	now := time.Date(2026, 3, 9, 12, 0, 0, 0, time.UTC)
	id := "0c6d7e7e-1111-4222-8333-944445555666"
	running := builders.MakeJob(id+"-retry-1", "bulkd", 1).NonIndexed(3).Active(1).Obj()
	done := builders.MakeJob(id+"-retry-1", "bulkd", 1).NonIndexed(3).Succeeded(1).Condition(batchv1.JobComplete, batchv1.JobReasonCompletionsReached).Obj()
	failed := builders.MakeJob(id+"-retry-1", "bulkd", 1).NonIndexed(3).Condition(batchv1.JobFailed, batchv1.JobReasonBackoffLimitExceeded).Obj()
	for _, c := range []struct {
		name   string
		data   *jobs.Job
		latest *batchv1.Job
		want   retryAction
		wait   time.Duration
	}{
		{"no data", nil, nil, retryNothing, 0},
		{"running", builders.MakeJobData(id).Obj(), nil, retryNothing, 0},
		{"completed", builders.MakeJobData(id).Completed(now).Obj(), done, retryNothing, 0},
		{"retrying, not due yet", builders.MakeJobData(id).Retrying(3, now.Add(time.Minute)).Obj(), nil, retryWait, time.Minute},
		{"retrying, due, no round yet", builders.MakeJobData(id).Retrying(3, now).Obj(), nil, retryCreate, 0},
		{"retrying, overdue, the last round done", builders.MakeJobData(id).Retrying(3, now.Add(-time.Hour)).Obj(), done, retryCreate, 0},
		{"retrying, due, the last round failed", builders.MakeJobData(id).Retrying(3, now).Obj(), failed, retryCreate, 0},
		{"retrying, due, a round runs", builders.MakeJobData(id).Retrying(3, now).Obj(), running, retryWait, 0},
		{"retrying, nothing scheduled", builders.MakeJobData(id).Retrying(0, time.Time{}).Obj(), nil, retryNothing, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, wait := decideRetry(c.data, c.latest, now)
			if got != c.want || wait != c.wait {
				t.Fatalf("decision %d wait %v, want %d %v", got, wait, c.want, c.wait)
			}
		})
	}
}

// --newcomer-slots: -1 keeps 1% of the budget (none under 100 slots), a
// number keeps that many, and a number that leaves no budget is refused.
func TestNewcomerSlots(t *testing.T) {
	for _, c := range []struct{ budget, flag, want int }{
		{5000, -1, 50}, {99, -1, 0}, {16, -1, 0}, {0, -1, 0}, {5000, 0, 0}, {5000, 7, 7},
	} {
		kc := config.DefaultKube()
		kc.MaxRunningShards, kc.NewcomerSlots = c.budget, c.flag
		if got := OptionsFrom(kc, time.Hour, corev1.ResourceRequirements{}).NewcomerSlots; got != int32(c.want) {
			t.Errorf("budget %d, --newcomer-slots %d: %d slots kept, want %d", c.budget, c.flag, got, c.want)
		}
	}
	kc := config.DefaultKube()
	kc.Namespace, kc.Image, kc.RedisSecretName, kc.RedisSecretKey = "bulkd", "bulkd:test", "redis", "url"
	for _, n := range []int{-2, 16, 17} {
		kc.NewcomerSlots = n
		if err := kc.Validate(); err == nil || !strings.Contains(err.Error(), "--newcomer-slots") {
			t.Errorf("--newcomer-slots %d with a budget of 16: %v, want refused", n, err)
		}
	}
	kc.NewcomerSlots = 15
	if err := kc.Validate(); err != nil {
		t.Errorf("--newcomer-slots 15 with a budget of 16: %v", err)
	}
}
