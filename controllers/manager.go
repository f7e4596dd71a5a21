package controllers

import (
	"fmt"
	"time"

	"github.com/go-logr/logr"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlconfig "sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/bulkd/bulkd/api/v1alpha1"
)

// ManagerOptions configure the manager of `bulkd controller`.
type ManagerOptions struct {
	// Namespace is the one namespace watched (BulkJobs and Jobs); empty
	// watches all namespaces.
	Namespace string
	// MetricsAddr and HealthAddr are the metrics and health-probe listen
	// addresses; "0" turns one off.
	MetricsAddr string
	HealthAddr  string
	// PprofAddr serves Go's profiles (/debug/pprof/); "" or "0" is off.
	PprofAddr string
	// LeaderElect makes replicas elect one active controller (a Lease
	// named LeaderElectionID in Namespace).
	LeaderElect      bool
	LeaderElectionID string
	// Concurrency is how many BulkJobs are reconciled at once.
	Concurrency int

	Reconciler Options
	Data       JobData
	Shards     ShardFailer
	// Progress is the processors' progress announcements; nil takes them
	// from Data when it has them (*jobs.Store does).
	Progress ProgressSource
	// Plans gives accounts' plans, which weigh their turn (nil: every
	// account weighs 1).
	Plans AccountPlans
	// ReadyCheck, when set, gates readiness (bulkd checks Redis).
	ReadyCheck healthz.Checker
	Logger     logr.Logger
	// Now is the reconciler's clock (tests); nil is time.Now.
	Now func() time.Time
	// SkipNameValidation lets one process run several managers (tests):
	// controller names are otherwise unique per process.
	SkipNameValidation bool
}

// DefaultLeaderElectionID is the Lease the controller replicas share.
const DefaultLeaderElectionID = "bulkd-controller.bulkd.io"

// NewManager builds the controller manager: cache (scoped to the namespace
// and, for Jobs, to the ones the controller made), metrics, health probes,
// leader election and the BulkJob controller.
func NewManager(cfg *rest.Config, o ManagerOptions) (ctrl.Manager, error) {
	if o.Data == nil || o.Shards == nil {
		return nil, fmt.Errorf("controller: job data and shard failer are required")
	}
	if err := o.Reconciler.Validate(); err != nil {
		return nil, fmt.Errorf("controller: %w", err)
	}
	// The families come from the registry the shard failer was built on:
	// a profile naming another family is a start-up error, not a setting
	// silently never applied.
	if err := CheckFamilyProfiles(o.Reconciler.Families, o.Shards.KnownFamilies()); err != nil {
		return nil, fmt.Errorf("controller: %w", err)
	}
	if o.LeaderElectionID == "" {
		o.LeaderElectionID = DefaultLeaderElectionID
	}
	scheme := v1alpha1.NewScheme()
	managed := labels.SelectorFromSet(labels.Set{v1alpha1.LabelManagedBy: v1alpha1.ManagedByController})
	cacheOpts := cache.Options{
		ByObject: map[client.Object]cache.ByObject{
			&batchv1.Job{}: {Label: managed},
			// Admission counts and un-gates the processor pods: only those
			// are cached (their template carries the label).
			&corev1.Pod{}: {Label: managed},
		},
	}
	if o.Namespace != "" {
		cacheOpts.DefaultNamespaces = map[string]cache.Config{o.Namespace: {}}
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                        scheme,
		Logger:                        o.Logger,
		Cache:                         cacheOpts,
		Metrics:                       metricsserver.Options{BindAddress: o.MetricsAddr},
		HealthProbeBindAddress:        o.HealthAddr,
		PprofBindAddress:              o.PprofAddr,
		LeaderElection:                o.LeaderElect,
		LeaderElectionID:              o.LeaderElectionID,
		LeaderElectionNamespace:       o.Namespace,
		LeaderElectionReleaseOnCancel: true,
		Controller:                    ctrlconfig.Controller{SkipNameValidation: &o.SkipNameValidation},
	})
	if err != nil {
		return nil, fmt.Errorf("controller manager: %w", err)
	}
	if o.HealthAddr != "0" && o.HealthAddr != "" {
		if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
			return nil, err
		}
		ready := healthz.Checker(healthz.Ping)
		if o.ReadyCheck != nil {
			ready = o.ReadyCheck
		}
		if err := mgr.AddReadyzCheck("redis", ready); err != nil {
			return nil, err
		}
	}
	if o.Progress == nil {
		o.Progress, _ = o.Data.(ProgressSource)
	}
	r := NewBulkJobReconciler(ReconcilerDeps{
		Client:    mgr.GetClient(),
		APIReader: mgr.GetAPIReader(),
		Scheme:    scheme,
		Recorder:  mgr.GetEventRecorder("bulkd-controller"),
		Data:      o.Data,
		Shards:    o.Shards,
		Options:   o.Reconciler,
		Progress:  o.Progress,
		Now:       o.Now,
		Plans:     o.Plans,
	})
	if err := r.SetupWithManager(mgr, o.Concurrency); err != nil {
		return nil, err
	}
	return mgr, nil
}
