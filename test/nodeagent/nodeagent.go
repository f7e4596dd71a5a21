// Package nodeagent stands in for the Job controller and the kubelet in
// envtest, which has neither: it watches the batch Jobs of a namespace and,
// for each completion index, runs the pod template's container as a local
// process (the real bulkd binary), then writes the Job's status the way
// the Job controller does: completedIndexes, failedIndexes,
// succeeded/failed/active counts, and at the end SuccessCriteriaMet+Complete
// or FailureTarget+Failed. A failed index of an Indexed Job is retried up
// to backoffLimitPerIndex times; a NonIndexed Job (the controller's retry
// Jobs: one completion) is retried until its failed pods exceed
// backoffLimit. The podFailurePolicy's Ignore (DisruptionTarget), FailIndex
// and FailJob (exit codes) rules are honoured.
//
// A Job whose pod template has scheduling gates gets Pod objects, as the
// Job controller makes them: one per index it starts (up to parallelism,
// gated pods counting as active), with the template's labels and gates,
// the completion-index annotation and the Job as controller; an index
// runs once its pod has no gate left (the scheduler's rule), and its
// pod's phase follows the process (Running, Succeeded, Failed). Pods of
// Jobs that are gone are deleted (envtest has no garbage collector).
// Other Jobs get no Pod objects.
//
// Tests only.
package nodeagent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Agent runs the pods of the Indexed Jobs in one namespace.
type Agent struct {
	Client    client.Client
	Namespace string
	// Binaries maps a container's command[0] to a local executable
	// ("bulkd" -> the binary the test built).
	Binaries map[string]string
	// BaseEnv is every process's starting environment (PATH, HOME...); the
	// container's resolved environment is added to it.
	BaseEnv []string
	// BeforeStart, when set, sees each attempt before it starts and may
	// change its environment (to make it fail, say).
	BeforeStart func(a *Attempt)
	// Output receives the processes' output, each line prefixed with its
	// job, index and attempt (nil: discarded).
	Output io.Writer
	// Logf logs what the agent does (nil: nothing).
	Logf func(format string, args ...any)
	// Poll is how often Jobs are listed; RetryDelay is the pause before a
	// failed index is retried.
	Poll       time.Duration
	RetryDelay time.Duration

	mu      sync.Mutex
	jobs    map[types.UID]*jobState
	history map[string][]Result // by Job name
	wake    chan struct{}
}

// Attempt is one run of one index (one pod).
type Attempt struct {
	Job    string
	Index  int
	Number int // 0 for the first attempt of the index
	Pod    string
	Env    map[string]string
	Args   []string // resolved command and args; Args[0] is the executable
}

// Result is how an attempt ended.
type Result struct {
	Index    int
	Number   int
	ExitCode int  // -1 when killed by a signal
	Killed   bool // killed through Kill
	Action   string
}

type indexPhase int

const (
	pending indexPhase = iota
	gated              // its pod exists and waits for its scheduling gates
	running
	succeeded
	failed
)

type indexState struct {
	phase    indexPhase
	failures int32 // counted failures
	attempts int
	notUntil time.Time // retry backoff
	pod      string    // the Pod object of the current attempt (gated templates)
}

type proc struct {
	cmd        *exec.Cmd
	killed     bool
	disruption bool
	pod        string // its Pod object, if it has one
}

type jobState struct {
	uid         types.UID
	name        string
	indexed     bool // Indexed completion mode (else NonIndexed)
	job         *batchv1.Job
	idx         []indexState
	procs       map[int]*proc
	failedPods  int32
	startTime   *metav1.Time
	terminating bool // a failure target was reached: stop everything
	reason      string
	finished    bool
	dirty       bool
}

// New returns an agent; Run starts it.
func New(c client.Client, namespace string, binaries map[string]string) *Agent {
	return &Agent{Client: c, Namespace: namespace, Binaries: binaries, Poll: 100 * time.Millisecond,
		RetryDelay: 50 * time.Millisecond, jobs: map[types.UID]*jobState{}, history: map[string][]Result{},
		wake: make(chan struct{}, 1)}
}

func (a *Agent) logf(format string, args ...any) {
	if a.Logf != nil {
		a.Logf("nodeagent: "+format, args...)
	}
}

func (a *Agent) poke() {
	select {
	case a.wake <- struct{}{}:
	default:
	}
}

// Run works until ctx ends, then kills every process it started.
func (a *Agent) Run(ctx context.Context) {
	t := time.NewTicker(a.Poll)
	defer t.Stop()
	defer a.killAll()
	for {
		if err := a.pass(ctx); err != nil && ctx.Err() == nil {
			a.logf("pass: %v", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-a.wake:
		}
	}
}

// Kill kills the running process of a Job's index, like a crashing or
// OOM-killed pod (disruption false: counts as a failure) or an evicted one
// (disruption true: the pod gets a DisruptionTarget condition, which the
// podFailurePolicy may ignore).
func (a *Agent) Kill(jobName string, index int, disruption bool) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, js := range a.jobs {
		if js.name != jobName {
			continue
		}
		p := js.procs[index]
		if p == nil {
			return fmt.Errorf("index %d of %s is not running", index, jobName)
		}
		p.killed, p.disruption = true, disruption
		return p.cmd.Process.Signal(syscall.SIGKILL)
	}
	return fmt.Errorf("job %s unknown", jobName)
}

// History is every finished attempt of a Job, in the order they ended.
func (a *Agent) History(jobName string) []Result {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.history[jobName])
}

func (a *Agent) killAll() {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, js := range a.jobs {
		for _, p := range js.procs {
			_ = p.cmd.Process.Kill()
		}
	}
}

func (a *Agent) pass(ctx context.Context) error {
	var list batchv1.JobList
	if err := a.Client.List(ctx, &list, client.InNamespace(a.Namespace)); err != nil {
		return err
	}
	var pods corev1.PodList
	if err := a.Client.List(ctx, &pods, client.InNamespace(a.Namespace)); err != nil {
		return err
	}
	byName := make(map[string]*corev1.Pod, len(pods.Items))
	jobUIDs := map[types.UID]bool{}
	for i := range list.Items {
		jobUIDs[list.Items[i].UID] = true
	}
	for i := range pods.Items {
		p := &pods.Items[i]
		byName[p.Name] = p
		if ref := metav1.GetControllerOf(p); ref != nil && ref.Kind == "Job" && !jobUIDs[ref.UID] && p.DeletionTimestamp.IsZero() {
			// The garbage collector's part: the Job is gone.
			if err := a.Client.Delete(ctx, p); err != nil && !apierrors.IsNotFound(err) {
				a.logf("delete pod %s of a deleted Job: %v", p.Name, err)
			}
		}
	}
	seen := map[types.UID]bool{}
	for i := range list.Items {
		job := &list.Items[i]
		if ptr.Deref(job.Spec.Suspend, false) || !job.DeletionTimestamp.IsZero() {
			continue
		}
		seen[job.UID] = true
		a.mu.Lock()
		js := a.jobs[job.UID]
		if js == nil {
			if isFinished(job) {
				a.mu.Unlock()
				continue
			}
			js = &jobState{uid: job.UID, name: job.Name, idx: make([]indexState, ptr.Deref(job.Spec.Completions, 1)),
				indexed: ptr.Deref(job.Spec.CompletionMode, batchv1.NonIndexedCompletion) == batchv1.IndexedCompletion,
				procs:   map[int]*proc{}, startTime: job.Status.StartTime}
			a.jobs[job.UID] = js
			a.logf("job %s: %d indexes, parallelism %d", job.Name, len(js.idx), ptr.Deref(job.Spec.Parallelism, 1))
		}
		js.job = job
		a.mu.Unlock()
		if js.finished {
			continue
		}
		if err := a.step(ctx, js, byName); err != nil {
			a.logf("job %s: %v", job.Name, err)
		}
	}
	// Jobs deleted: their pods go with them.
	a.mu.Lock()
	for uid, js := range a.jobs {
		if !seen[uid] {
			for _, p := range js.procs {
				p.killed = true
				_ = p.cmd.Process.Kill()
			}
			delete(a.jobs, uid)
		}
	}
	a.mu.Unlock()
	return nil
}

// step starts what may start and writes the status when it changed; pods
// are the namespace's Pod objects by name.
func (a *Agent) step(ctx context.Context, js *jobState, pods map[string]*corev1.Pod) error {
	a.mu.Lock()
	if js.startTime == nil {
		js.startTime = ptr.To(metav1.Now())
		js.dirty = true
	}
	a.checkMaxFailed(js)
	starts, creates, err := a.plan(ctx, js, pods)
	a.mu.Unlock()
	if err != nil {
		return err
	}
	if err := a.launch(ctx, js, pods, starts, creates); err != nil {
		return err
	}
	a.mu.Lock()
	final := finalConditions(js)
	if !js.dirty {
		a.mu.Unlock()
		return nil
	}
	status := a.statusOf(js)
	js.dirty = false
	a.mu.Unlock()
	return a.writeStatus(ctx, js, status, final)
}

// checkMaxFailed stops the Job once more indexes failed than its
// maxFailedIndexes. Call with a.mu held.
func (a *Agent) checkMaxFailed(js *jobState) {
	if js.terminating {
		return
	}
	maxFailed := js.job.Spec.MaxFailedIndexes
	nFailed := int32(0)
	for _, s := range js.idx {
		if s.phase == failed {
			nFailed++
		}
	}
	if maxFailed != nil && nFailed > *maxFailed {
		js.terminating, js.reason = true, batchv1.JobReasonMaxFailedIndexesExceeded
		for _, p := range js.procs {
			p.killed = true
			_ = p.cmd.Process.Kill()
		}
		js.dirty = true
	}
}

// plan decides what starts now: the attempts to run (an index whose gated
// pod lost its gates, or a pending one of a Job without gates) and the
// gated pods to create, up to the Job's parallelism. Call with a.mu held.
func (a *Agent) plan(ctx context.Context, js *jobState, pods map[string]*corev1.Pod) (starts []*Attempt, creates []*corev1.Pod, err error) {
	if js.terminating {
		return nil, nil, nil
	}
	job := js.job
	par := int(ptr.Deref(job.Spec.Parallelism, 1))
	gates := len(job.Spec.Template.Spec.SchedulingGates) > 0
	active := len(js.procs)
	for _, s := range js.idx {
		if s.phase == gated {
			active++
		}
	}
	now := time.Now()
	for i := range js.idx {
		s := &js.idx[i]
		switch {
		case s.phase == gated:
			// Scheduled once no gate is left.
			if p := pods[s.pod]; p == nil || len(p.Spec.SchedulingGates) > 0 {
				continue
			}
			at, err := a.prepare(ctx, job, i, s.attempts)
			if err != nil {
				return nil, nil, fmt.Errorf("index %d: %w", i, err)
			}
			at.Pod = s.pod
			s.phase = running
			s.attempts++
			starts = append(starts, at)
		case s.phase != pending || now.Before(s.notUntil) || active >= par:
		case gates:
			p := podFor(job, i, s.attempts)
			s.phase, s.pod = gated, p.Name
			creates = append(creates, p)
			active++
			js.dirty = true
		default:
			at, err := a.prepare(ctx, job, i, s.attempts)
			if err != nil {
				return nil, nil, fmt.Errorf("index %d: %w", i, err)
			}
			s.phase = running
			s.attempts++
			starts = append(starts, at)
			active++
		}
	}
	return starts, creates, nil
}

// launch creates the gated pods and starts the attempts planned.
func (a *Agent) launch(ctx context.Context, js *jobState, pods map[string]*corev1.Pod, starts []*Attempt, creates []*corev1.Pod) error {
	for _, p := range creates {
		if err := a.Client.Create(ctx, p); err != nil {
			a.mu.Lock()
			i, _ := strconv.Atoi(p.Annotations[batchv1.JobCompletionIndexAnnotation])
			js.idx[i].phase, js.idx[i].pod = pending, ""
			a.mu.Unlock()
			return fmt.Errorf("create pod %s: %w", p.Name, err)
		}
	}
	for _, at := range starts {
		if a.BeforeStart != nil {
			a.BeforeStart(at)
		}
		a.start(js, at)
		if at.Pod != "" && pods[at.Pod] != nil {
			a.setPodPhase(ctx, at.Pod, corev1.PodRunning, 0)
		}
	}
	return nil
}

// finalConditions are the conditions of a Job that has just ended (nil
// while it runs). Call with a.mu held.
func finalConditions(js *jobState) []batchv1.JobCondition {
	allSettled := true
	anyFailed := false
	for _, s := range js.idx {
		switch s.phase {
		case pending, gated, running:
			allSettled = false
		case failed:
			anyFailed = true
		}
	}
	if len(js.procs) > 0 || (!js.terminating && !allSettled) {
		return nil
	}
	js.dirty = true
	now := metav1.Now()
	switch {
	case js.terminating:
		return failureConds(js.reason, now)
	case anyFailed:
		return failureConds(batchv1.JobReasonFailedIndexes, now)
	}
	return []batchv1.JobCondition{
		{Type: batchv1.JobSuccessCriteriaMet, Status: corev1.ConditionTrue, Reason: batchv1.JobReasonCompletionsReached,
			Message: "Reached expected number of succeeded pods", LastProbeTime: now, LastTransitionTime: now},
		{Type: batchv1.JobComplete, Status: corev1.ConditionTrue, Reason: batchv1.JobReasonCompletionsReached,
			Message: "Reached expected number of succeeded pods", LastProbeTime: now, LastTransitionTime: now},
	}
}

// prepare resolves a pod of the Job for index i: environment, command.
// Call with a.mu held.
func (a *Agent) prepare(ctx context.Context, job *batchv1.Job, i, number int) (*Attempt, error) {
	indexed := ptr.Deref(job.Spec.CompletionMode, batchv1.NonIndexedCompletion) == batchv1.IndexedCompletion
	spec := job.Spec.Template.Spec
	if len(spec.Containers) != 1 {
		return nil, fmt.Errorf("want one container, have %d", len(spec.Containers))
	}
	c := spec.Containers[0]
	pod := fmt.Sprintf("%s-%d-%05d", job.Name, i, rand.IntN(100000))
	env := map[string]string{}
	for _, ef := range c.EnvFrom {
		data, err := a.source(ctx, ef.ConfigMapRef, ef.SecretRef)
		if err != nil {
			return nil, err
		}
		for k, v := range data {
			env[ef.Prefix+k] = v
		}
	}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			env[e.Name] = expand(e.Value, env)
		case e.ValueFrom.FieldRef != nil:
			switch fp := e.ValueFrom.FieldRef.FieldPath; fp {
			case "metadata.annotations['" + batchv1.JobCompletionIndexAnnotation + "']":
				env[e.Name] = strconv.Itoa(i)
			case "metadata.name":
				env[e.Name] = pod
			case "metadata.namespace":
				env[e.Name] = job.Namespace
			default:
				return nil, fmt.Errorf("env %s: field %s not supported", e.Name, fp)
			}
		case e.ValueFrom.SecretKeyRef != nil:
			v, err := a.key(ctx, &corev1.Secret{}, e.ValueFrom.SecretKeyRef.Name, e.ValueFrom.SecretKeyRef.Key)
			if err != nil {
				return nil, fmt.Errorf("env %s: %w", e.Name, err)
			}
			env[e.Name] = v
		case e.ValueFrom.ConfigMapKeyRef != nil:
			v, err := a.key(ctx, &corev1.ConfigMap{}, e.ValueFrom.ConfigMapKeyRef.Name, e.ValueFrom.ConfigMapKeyRef.Key)
			if err != nil {
				return nil, fmt.Errorf("env %s: %w", e.Name, err)
			}
			env[e.Name] = v
		default:
			return nil, fmt.Errorf("env %s: source not supported", e.Name)
		}
	}
	if _, ok := env["JOB_COMPLETION_INDEX"]; !ok && indexed { // the Job controller adds it to Indexed Jobs' pods
		env["JOB_COMPLETION_INDEX"] = strconv.Itoa(i)
	}
	var args []string
	for _, s := range append(slices.Clone(c.Command), c.Args...) {
		args = append(args, expand(s, env))
	}
	if len(args) == 0 {
		return nil, errors.New("container has no command")
	}
	return &Attempt{Job: job.Name, Index: i, Number: number, Pod: pod, Env: env, Args: args}, nil
}

func (a *Agent) source(ctx context.Context, cm *corev1.ConfigMapEnvSource, sec *corev1.SecretEnvSource) (map[string]string, error) {
	out := map[string]string{}
	switch {
	case cm != nil:
		var obj corev1.ConfigMap
		err := a.Client.Get(ctx, client.ObjectKey{Namespace: a.Namespace, Name: cm.Name}, &obj)
		if apierrors.IsNotFound(err) && ptr.Deref(cm.Optional, false) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("configmap %s: %w", cm.Name, err)
		}
		return obj.Data, nil
	case sec != nil:
		var obj corev1.Secret
		err := a.Client.Get(ctx, client.ObjectKey{Namespace: a.Namespace, Name: sec.Name}, &obj)
		if apierrors.IsNotFound(err) && ptr.Deref(sec.Optional, false) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("secret %s: %w", sec.Name, err)
		}
		for k, v := range obj.Data {
			out[k] = string(v)
		}
	}
	return out, nil
}

func (a *Agent) key(ctx context.Context, obj client.Object, name, key string) (string, error) {
	if err := a.Client.Get(ctx, client.ObjectKey{Namespace: a.Namespace, Name: name}, obj); err != nil {
		return "", err
	}
	switch o := obj.(type) {
	case *corev1.Secret:
		if v, ok := o.Data[key]; ok {
			return string(v), nil
		}
	case *corev1.ConfigMap:
		if v, ok := o.Data[key]; ok {
			return v, nil
		}
	}
	return "", fmt.Errorf("%s has no key %q", name, key)
}

// expand resolves $(VAR) references the way the kubelet does: defined
// variables are replaced, $$ escapes a $, anything else stays as written.
func expand(s string, env map[string]string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 >= len(s) {
			b.WriteByte(s[i])
			continue
		}
		switch s[i+1] {
		case '$':
			b.WriteByte('$')
			i++
		case '(':
			end := strings.IndexByte(s[i+2:], ')')
			if end < 0 {
				b.WriteString(s[i:])
				return b.String()
			}
			name := s[i+2 : i+2+end]
			if v, ok := env[name]; ok {
				b.WriteString(v)
			} else {
				b.WriteString(s[i : i+3+end])
			}
			i += 2 + end
		default:
			b.WriteByte('$')
		}
	}
	return b.String()
}

// start runs an attempt's process; its end is recorded by wait.
func (a *Agent) start(js *jobState, at *Attempt) {
	bin := at.Args[0]
	if b, ok := a.Binaries[bin]; ok {
		bin = b
	}
	cmd := exec.Command(bin, at.Args[1:]...)
	cmd.Env = slices.Clone(a.BaseEnv)
	for k, v := range at.Env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	out := &prefixWriter{w: a.Output, prefix: fmt.Sprintf("[%s/%d#%d] ", at.Job, at.Index, at.Number)}
	cmd.Stdout, cmd.Stderr = out, out
	a.mu.Lock()
	defer a.mu.Unlock()
	if err := cmd.Start(); err != nil {
		a.logf("job %s index %d: start: %v", at.Job, at.Index, err)
		a.settle(js, at, &proc{}, 127)
		return
	}
	p := &proc{cmd: cmd, pod: at.Pod}
	js.procs[at.Index] = p
	js.dirty = true
	go a.wait(js, at, p)
}

func (a *Agent) wait(js *jobState, at *Attempt, p *proc) {
	err := p.cmd.Wait()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode() // -1 when signalled
	} else if err != nil {
		code = 127
	}
	a.mu.Lock()
	delete(js.procs, at.Index)
	a.settle(js, at, p, code)
	a.mu.Unlock()
	if p.pod != "" {
		phase := corev1.PodSucceeded
		if code != 0 || p.killed {
			phase = corev1.PodFailed
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		a.setPodPhase(ctx, p.pod, phase, code)
		cancel()
	}
	a.poke()
}

// settle records an attempt's end and applies the podFailurePolicy and
// backoffLimitPerIndex. Call with a.mu held.
func (a *Agent) settle(js *jobState, at *Attempt, p *proc, code int) {
	s := &js.idx[at.Index]
	js.dirty = true
	action := "Succeeded"
	switch {
	case code == 0 && !p.killed:
		s.phase = succeeded
	case js.terminating:
		s.phase = pending
		js.failedPods++
		action = "Terminated"
	default:
		action = a.policyAction(js.job, code, p.disruption)
		switch action {
		case string(batchv1.PodFailurePolicyActionIgnore):
			s.phase = pending
		case string(batchv1.PodFailurePolicyActionFailIndex):
			js.failedPods++
			s.phase = failed
		case string(batchv1.PodFailurePolicyActionFailJob):
			js.failedPods++
			s.phase = failed
			js.terminating, js.reason = true, batchv1.JobReasonPodFailurePolicy
		default: // Count
			js.failedPods++
			s.failures++
			switch {
			case js.indexed && js.job.Spec.BackoffLimitPerIndex != nil:
				if s.failures > *js.job.Spec.BackoffLimitPerIndex {
					s.phase = failed
				} else {
					s.phase = pending
					s.notUntil = time.Now().Add(a.RetryDelay)
				}
			case js.failedPods > ptr.Deref(js.job.Spec.BackoffLimit, 6): // the Job's default
				s.phase = failed
				js.terminating, js.reason = true, batchv1.JobReasonBackoffLimitExceeded
			default:
				s.phase = pending
				s.notUntil = time.Now().Add(a.RetryDelay)
			}
		}
	}
	a.history[js.name] = append(a.history[js.name], Result{Index: at.Index, Number: at.Number, ExitCode: code, Killed: p.killed, Action: action})
	a.logf("job %s index %d attempt %d: exit %d killed=%v -> %s", js.name, at.Index, at.Number, code, p.killed, action)
}

// policyAction is the podFailurePolicy's verdict on a failed pod: the
// first matching rule's action, else Count.
func (a *Agent) policyAction(job *batchv1.Job, code int, disruption bool) string {
	if job.Spec.PodFailurePolicy == nil {
		return string(batchv1.PodFailurePolicyActionCount)
	}
	for _, r := range job.Spec.PodFailurePolicy.Rules {
		if r.OnExitCodes != nil && code >= 0 {
			in := slices.Contains(r.OnExitCodes.Values, int32(code))
			if (r.OnExitCodes.Operator == batchv1.PodFailurePolicyOnExitCodesOpIn) == in {
				return string(r.Action)
			}
		}
		for _, pc := range r.OnPodConditions {
			if disruption && pc.Type == corev1.DisruptionTarget && pc.Status == corev1.ConditionTrue {
				return string(r.Action)
			}
		}
	}
	return string(batchv1.PodFailurePolicyActionCount)
}

func isFinished(job *batchv1.Job) bool {
	for _, c := range job.Status.Conditions {
		if (c.Type == batchv1.JobComplete || c.Type == batchv1.JobFailed) && c.Status == corev1.ConditionTrue {
			return true
		}
	}
	return false
}

// prefixWriter prefixes each line.
type prefixWriter struct {
	mu     sync.Mutex
	w      io.Writer
	prefix string
	buf    bytes.Buffer
}

func (p *prefixWriter) Write(b []byte) (int, error) {
	if p.w == nil {
		return len(b), nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.buf.Write(b)
	for {
		line, err := p.buf.ReadBytes('\n')
		if err != nil {
			p.buf.Write(line)
			break
		}
		_, _ = io.WriteString(p.w, p.prefix+string(line))
	}
	return len(b), nil
}
