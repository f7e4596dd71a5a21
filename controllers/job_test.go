package controllers

import (
	"reflect"
	"slices"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/bulkd/bulkd/api/v1alpha1"
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
		got, err := parseIndexes(c.in, c.n)
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
			if len(ok) != c.succeeded || !slices.Equal(keys, c.failed) || jobFinished(c.job) != c.expectFinsish {
				t.Fatalf("succeeded %v failed %v finished %v", ok, keys, jobFinished(c.job))
			}
		})
	}
}
