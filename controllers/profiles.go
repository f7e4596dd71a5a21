package controllers

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	kjson "sigs.k8s.io/json"

	"github.com/bulkd/bulkd/api/v1alpha1"
)

// FamilyProfile is one family's own processor settings (`bulkd controller
// --family-profiles`), for the pods of its shard and retry Jobs. Every
// field is optional and falls back to the operator-wide setting: the email
// verification pods, say, need SMTP egress (nodes with a clean IP, a HELO
// name, a MAIL FROM) that company enrichment does not.
type FamilyProfile struct {
	// ParallelismCap caps the family's BulkJobs' parallelism, on top of
	// the operator-wide cap (0 or absent: no cap of its own).
	ParallelismCap int32 `json:"parallelismCap,omitempty"`
	// Resources replace the operator-wide processor resources (as a whole).
	Resources *corev1.ResourceRequirements `json:"resources,omitempty"`
	// ConfigMap is a ConfigMap of BULKD_* settings loaded after the
	// operator-wide one, so its keys win (optional, like that one).
	ConfigMap string `json:"configMap,omitempty"`
	// Env is added to the processor container's environment; it wins over
	// both ConfigMaps. BULKD_REDIS_URL and JOB_COMPLETION_INDEX are the
	// controller's.
	Env map[string]string `json:"env,omitempty"`
	// NodeSelector and Tolerations place the family's pods (the
	// operator-wide processor pods have none).
	NodeSelector map[string]string   `json:"nodeSelector,omitempty"`
	Tolerations  []corev1.Toleration `json:"tolerations,omitempty"`
	// HostNetwork runs the family's pods in their node's network namespace
	// (pod.spec.hostNetwork, with dnsPolicy ClusterFirstWithHostNet so
	// cluster names still resolve): their connections leave from the
	// node's own address, e.g. the clean egress IP that SMTP checks need
	// (with NodeSelector picking those nodes). The processor listens on no
	// port, so pods on one node do not collide.
	HostNetwork bool `json:"hostNetwork,omitempty"`
}

// reservedEnv are the variables the controller sets itself.
var reservedEnv = []string{"BULKD_REDIS_URL", completionIndexEnv}

// ParseFamilyProfiles reads --family-profiles: a JSON object of profiles
// by family name ("" is none). Unknown families and fields are errors.
func ParseFamilyProfiles(s string) (map[v1alpha1.Family]FamilyProfile, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var raw map[string]json.RawMessage
	if err := strict([]byte(s), &raw); err != nil {
		return nil, fmt.Errorf("family profiles: want a JSON object by family: %w", err)
	}
	out := make(map[v1alpha1.Family]FamilyProfile, len(raw))
	for _, name := range slices.Sorted(maps.Keys(raw)) {
		fam := v1alpha1.Family(name)
		// The form only: NewManager checks the names against the
		// family registry (CheckFamilyProfiles).
		if !familyName.MatchString(name) {
			return nil, fmt.Errorf("family profiles: %q is not a family name (%s)", name, v1alpha1.FamilyPattern)
		}
		var p FamilyProfile
		if err := strict(raw[name], &p); err != nil {
			return nil, fmt.Errorf("family profiles: %s: %w", name, err)
		}
		if err := p.validate(); err != nil {
			return nil, fmt.Errorf("family profiles: %s: %w", name, err)
		}
		out[fam] = p
	}
	return out, nil
}

var familyName = regexp.MustCompile(v1alpha1.FamilyPattern)

// CheckFamilyProfiles fails for a profile of a family this build does not
// know (a typo in --family-profiles would otherwise never apply): the
// controller refuses to start.
func CheckFamilyProfiles(profiles map[v1alpha1.Family]FamilyProfile, known []string) error {
	for _, name := range slices.Sorted(maps.Keys(profiles)) {
		if !slices.Contains(known, string(name)) {
			return fmt.Errorf("--family-profiles: unknown family %q (known: %v)", name, known)
		}
	}
	return nil
}

// strict decodes JSON the way the Kubernetes API server does: field names
// match exactly, and unknown or repeated ones are errors.
func strict(data []byte, v any) error {
	serrs, err := kjson.UnmarshalStrict(data, v)
	if err != nil {
		return err
	}
	return errors.Join(serrs...)
}

func (p *FamilyProfile) validate() error {
	if p.ParallelismCap < 0 {
		return fmt.Errorf("parallelismCap cannot be negative")
	}
	if p.ConfigMap != "" {
		if errs := validation.IsDNS1123Subdomain(p.ConfigMap); len(errs) > 0 {
			return fmt.Errorf("configMap %q: %s", p.ConfigMap, strings.Join(errs, "; "))
		}
	}
	for k := range p.Env {
		if errs := validation.IsEnvVarName(k); len(errs) > 0 {
			return fmt.Errorf("env %q: %s", k, strings.Join(errs, "; "))
		}
		if slices.Contains(reservedEnv, k) {
			return fmt.Errorf("env %s is set by the controller", k)
		}
	}
	for k, v := range p.NodeSelector {
		if errs := validation.IsQualifiedName(k); len(errs) > 0 {
			return fmt.Errorf("nodeSelector key %q: %s", k, strings.Join(errs, "; "))
		}
		if errs := validation.IsValidLabelValue(v); len(errs) > 0 {
			return fmt.Errorf("nodeSelector %s value %q: %s", k, v, strings.Join(errs, "; "))
		}
	}
	return nil
}

// processorSettings are the pod settings of one family's processors: the
// operator-wide ones with the family's profile applied.
type processorSettings struct {
	parallelismCap int32 // 0: none
	resources      corev1.ResourceRequirements
	configMaps     []string
	env            []corev1.EnvVar // sorted by name
	nodeSelector   map[string]string
	tolerations    []corev1.Toleration
	hostNetwork    bool
	dnsPolicy      corev1.DNSPolicy // "": the API server's default (ClusterFirst)
}

// forFamily applies fam's profile (if any) to the operator-wide settings.
func (o Options) forFamily(fam v1alpha1.Family) processorSettings {
	s := processorSettings{parallelismCap: o.MaxParallelism, resources: *o.Resources.DeepCopy()}
	if o.ConfigMapName != "" {
		s.configMaps = append(s.configMaps, o.ConfigMapName)
	}
	p, ok := o.Families[fam]
	if !ok {
		return s
	}
	if p.ParallelismCap > 0 && (s.parallelismCap <= 0 || p.ParallelismCap < s.parallelismCap) {
		s.parallelismCap = p.ParallelismCap
	}
	if p.Resources != nil {
		s.resources = *p.Resources.DeepCopy()
	}
	if p.ConfigMap != "" && p.ConfigMap != o.ConfigMapName {
		s.configMaps = append(s.configMaps, p.ConfigMap)
	}
	for _, k := range slices.Sorted(maps.Keys(p.Env)) {
		s.env = append(s.env, corev1.EnvVar{Name: k, Value: p.Env[k]})
	}
	if len(p.NodeSelector) > 0 {
		s.nodeSelector = maps.Clone(p.NodeSelector)
	}
	for _, t := range p.Tolerations {
		s.tolerations = append(s.tolerations, *t.DeepCopy())
	}
	if p.HostNetwork {
		// In the node's network namespace, ClusterFirst would fall back to
		// the node's resolver; this keeps cluster names resolvable.
		s.hostNetwork, s.dnsPolicy = true, corev1.DNSClusterFirstWithHostNet
	}
	return s
}

// ParseResources reads a container's resources as JSON:
// {"requests":{"cpu":"250m","memory":"256Mi"},"limits":{"memory":"1Gi"}}.
func ParseResources(s string) (corev1.ResourceRequirements, error) {
	var rr corev1.ResourceRequirements
	if strings.TrimSpace(s) == "" {
		return rr, nil
	}
	dec := json.NewDecoder(strings.NewReader(s))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rr); err != nil {
		return rr, fmt.Errorf("resources %q: %w", s, err)
	}
	return rr, nil
}
