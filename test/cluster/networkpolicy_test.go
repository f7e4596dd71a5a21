//go:build e2ecluster

package cluster_test

import (
	"context"
	"strings"
	"testing"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// The chart's NetworkPolicies are installed (networkPolicy.enabled is on by
// default) and select the pods that run: the API, the controller, and the
// processor pods of the jobs the other tests ran. The jobs of every family
// the suite runs pass with them installed and, unless E2E_NETPOL=0,
// enforced (kube-network-policies; TestNetworkPoliciesEnforced); what they
// allow towards every kind of destination is proven by test/chart
// (TestNetworkPolicies).
func TestNetworkPoliciesInstalled(t *testing.T) {
	ctx := context.Background()
	nps, err := h.cs.NetworkingV1().NetworkPolicies(h.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]networkingv1.NetworkPolicy{}
	for _, np := range nps.Items {
		byName[np.Name] = np
	}
	for _, c := range []struct{ policy, pods string }{
		{release + "-apiserver", "app.kubernetes.io/component=apiserver,app.kubernetes.io/instance=" + release},
		{release + "-controller", "app.kubernetes.io/component=controller,app.kubernetes.io/instance=" + release},
		{release + "-processor", "app.kubernetes.io/component=processor"},
	} {
		np, ok := byName[c.policy]
		if !ok {
			t.Errorf("NetworkPolicy %s is not installed (have %d)", c.policy, len(nps.Items))
			continue
		}
		sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
		if err != nil {
			t.Fatal(err)
		}
		pods, err := h.cs.CoreV1().Pods(h.ns).List(ctx, metav1.ListOptions{LabelSelector: c.pods})
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, p := range pods.Items {
			if p.Spec.HostNetwork { // outside every NetworkPolicy
				continue
			}
			if !sel.Matches(labels.Set(p.Labels)) {
				t.Errorf("NetworkPolicy %s does not select pod %s %v", c.policy, p.Name, p.Labels)
			}
			n++
		}
		if n == 0 && c.policy != release+"-processor" { // processor pods may all be gone (job TTL) or hostNetwork
			t.Errorf("no pod for %s", c.policy)
		}
		t.Logf("%s selects %d running pod(s)", c.policy, n)
	}
	// The app's own outbound allowance reaches every component.
	cm, err := h.cs.CoreV1().ConfigMaps(h.ns).Get(ctx, release+"-config", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if v := cm.Data["BULKD_OUTBOUND_ALLOW_CIDRS"]; !strings.Contains(v, "127.0.0.0/8") {
		t.Errorf("the chart's ConfigMap BULKD_OUTBOUND_ALLOW_CIDRS = %q, want the mail world's loopback range (e2e.sh)", v)
	}
}
