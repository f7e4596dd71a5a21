package chart

// The chart's NetworkPolicies (issue 18 item 7), judged by what they let
// through rather than by their text: a small evaluator of NetworkPolicy
// semantics (ipBlock with except, pod and namespace selectors, ports)
// answers, for each bulkd pod, whether a connection to an address and port
// is allowed. Every render is also dry-run applied to envtest's API server,
// so the API's own validation of the policies runs too.

import (
	"context"
	"net/netip"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/bulkd/bulkd/api/v1alpha1"
)

// endpoint is one end of a connection: a pod (labels, namespace labels) at
// an address, or an address outside the cluster's pods.
type endpoint struct {
	ip     string
	pod    map[string]string // nil: not a pod
	ns     string            // the pod's namespace
	nsTags map[string]string // its namespace's labels
}

func addr(ip string) endpoint { return endpoint{ip: ip} }

// policies of a render, decoded.
func policies(t *testing.T, r *rendered) []networkingv1.NetworkPolicy {
	t.Helper()
	var out []networkingv1.NetworkPolicy
	for _, o := range r.ofKind("NetworkPolicy") {
		var np networkingv1.NetworkPolicy
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &np); err != nil {
			t.Fatalf("NetworkPolicy %s: %v", o.GetName(), err)
		}
		out = append(out, np)
	}
	return out
}

func selects(sel *networkingv1.NetworkPolicy, labels map[string]string) bool {
	for k, v := range sel.Spec.PodSelector.MatchLabels {
		if labels[k] != v {
			return false
		}
	}
	return len(sel.Spec.PodSelector.MatchExpressions) == 0
}

func labelsOK(ml map[string]string, labels map[string]string) bool {
	for k, v := range ml {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// peerMatches: does a NetworkPolicyPeer (of a policy in ns) take in e?
func peerMatches(p networkingv1.NetworkPolicyPeer, ns string, e endpoint) bool {
	if p.IPBlock != nil {
		if e.ip == "" {
			return false
		}
		// An IPv4-mapped address leaves the pod as IPv4: that is what
		// the network plugin sees.
		a := netip.MustParseAddr(e.ip).Unmap()
		in := func(c string) bool { return netip.MustParsePrefix(c).Contains(a) }
		if !in(p.IPBlock.CIDR) {
			return false
		}
		return !slices.ContainsFunc(p.IPBlock.Except, in)
	}
	if e.pod == nil {
		return false
	}
	if p.NamespaceSelector == nil {
		if e.ns != ns {
			return false
		}
	} else if !labelsOK(p.NamespaceSelector.MatchLabels, e.nsTags) {
		return false
	}
	return p.PodSelector == nil || labelsOK(p.PodSelector.MatchLabels, e.pod)
}

func portMatches(ports []networkingv1.NetworkPolicyPort, proto string, port int) bool {
	if len(ports) == 0 {
		return true
	}
	for _, p := range ports {
		pr := "TCP"
		if p.Protocol != nil {
			pr = string(*p.Protocol)
		}
		if pr == proto && (p.Port == nil || p.Port.Type == intstr.Int && int(p.Port.IntVal) == port) {
			return true
		}
	}
	return false
}

// egressAllowed: may a pod with labels (in ns) connect to e on proto/port?
// Not selected by any Egress policy: everything. Else any rule of any
// selecting policy must allow it.
func egressAllowed(nps []networkingv1.NetworkPolicy, ns string, labels map[string]string, e endpoint, proto string, port int) bool {
	selected := false
	for _, np := range nps {
		if !selects(&np, labels) || !slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeEgress) {
			continue
		}
		selected = true
		for _, r := range np.Spec.Egress {
			if !portMatches(r.Ports, proto, port) {
				continue
			}
			if len(r.To) == 0 || slices.ContainsFunc(r.To, func(p networkingv1.NetworkPolicyPeer) bool { return peerMatches(p, ns, e) }) {
				return true
			}
		}
	}
	return !selected
}

// ingressAllowed: may e connect to a pod with labels (in ns) on port?
func ingressAllowed(nps []networkingv1.NetworkPolicy, ns string, labels map[string]string, e endpoint, port int) bool {
	selected := false
	for _, np := range nps {
		if !selects(&np, labels) || !slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeIngress) {
			continue
		}
		selected = true
		for _, r := range np.Spec.Ingress {
			if !portMatches(r.Ports, "TCP", port) {
				continue
			}
			if len(r.From) == 0 || slices.ContainsFunc(r.From, func(p networkingv1.NetworkPolicyPeer) bool { return peerMatches(p, ns, e) }) {
				return true
			}
		}
	}
	return !selected
}

// podLabels of a Deployment's or StatefulSet's pod template.
func podLabels(t *testing.T, o *unstructured.Unstructured) map[string]string {
	t.Helper()
	out := map[string]string{}
	for k, v := range asMap(nested(t, o, "spec", "template", "metadata", "labels")) {
		out[k], _ = v.(string)
	}
	return out
}

// processorLabels are what the controller puts on processor pods
// (controllers/job.go jobLabels), with a job's own labels.
func processorLabels() map[string]string {
	return map[string]string{v1alpha1.LabelName: "bulkd", v1alpha1.LabelComponent: "processor",
		v1alpha1.LabelManagedBy: v1alpha1.ManagedByController, v1alpha1.LabelJobID: "0b6f3c2e-5d4a-4c8e-9f1a-2b3c4d5e6f70",
		v1alpha1.LabelFamily: string(v1alpha1.FamilyEmailVerification)}
}

var kubeDNS = endpoint{ip: "10.244.0.3", pod: map[string]string{"k8s-app": "kube-dns"}, ns: "kube-system",
	nsTags: map[string]string{"kubernetes.io/metadata.name": "kube-system"}}

// Addresses a customer may make bulkd connect to that are not public, on
// the ports bulkd's work uses: all refused, for every bulkd pod, in every
// value set (the metadata service, loopback, RFC 1918, CGNAT, IPv6
// unique-local and link-local, IPv4-mapped, documentation ranges).
var private = []string{"169.254.169.254", "127.0.0.1", "10.1.2.3", "172.16.5.4", "192.168.1.1", "100.64.0.9", "0.1.2.3",
	"192.0.2.10", "198.18.0.1", "fd00::1", "fe80::1", "::1", "::ffff:10.1.2.3", "2001:db8::5", "64:ff9b:1::a01:203"}

func TestNetworkPolicies(t *testing.T) {
	c := cluster(t)
	const ns = "chart-netpol"
	ensureNamespace(t, c, ns)
	renderOK := func(t *testing.T, values string) *rendered {
		t.Helper()
		r, err := render(t, "bulkd", ns, parseValues(t, values))
		if err != nil {
			t.Fatalf("render: %v", err)
		}
		dryRunApply(t, c, r.objs)
		return r
	}
	pub4, pub6 := addr("93.184.216.34"), addr("2606:2800:220:1:248:1893:25c8:1946")

	t.Run("defaults", func(t *testing.T) {
		r := renderOK(t, "")
		nps := policies(t, r)
		if len(nps) != 3 {
			t.Fatalf("%d NetworkPolicies, want apiserver, controller, processor: %s", len(nps), r.names())
		}
		api, ctl := podLabels(t, r.get(t, "Deployment", "bulkd-apiserver")), podLabels(t, r.get(t, "Deployment", "bulkd-controller"))
		pods := map[string]map[string]string{"apiserver": api, "controller": ctl, "processor": processorLabels()}
		for name, labels := range pods {
			n := 0
			for _, np := range nps {
				if selects(&np, labels) {
					n++
				}
			}
			if n != 1 {
				t.Errorf("%s pods are selected by %d policies, want 1", name, n)
			}
			for _, port := range []int{25, 80, 443} {
				for _, dst := range []endpoint{pub4, pub6} {
					if !egressAllowed(nps, ns, labels, dst, "TCP", port) {
						t.Errorf("%s: public %s:%d refused", name, dst.ip, port)
					}
				}
			}
			for _, port := range []int{22, 3306, 8080} {
				if egressAllowed(nps, ns, labels, pub4, "TCP", port) {
					t.Errorf("%s: public port %d allowed", name, port)
				}
			}
			// The metadata service and link-local: never, on any port
			// (also by the fallbacks for the Kubernetes API and Redis).
			for _, ip := range []string{"169.254.169.254", "fe80::1"} {
				for _, port := range []int{80, 443, 6379, 6443} {
					if egressAllowed(nps, ns, labels, addr(ip), "TCP", port) {
						t.Errorf("%s: %s:%d allowed", name, ip, port)
					}
				}
			}
			if !egressAllowed(nps, ns, labels, kubeDNS, "UDP", 53) || !egressAllowed(nps, ns, labels, kubeDNS, "TCP", 53) {
				t.Errorf("%s: cluster DNS refused", name)
			}
			other := kubeDNS
			other.pod = map[string]string{"app": "something-else"}
			if egressAllowed(nps, ns, labels, other, "UDP", 53) || egressAllowed(nps, ns, labels, addr("8.8.8.8"), "UDP", 53) {
				t.Errorf("%s: DNS to other than the cluster DNS allowed", name)
			}
		}
		// Processors never talk to the Kubernetes API, nor to private
		// addresses on the public ports.
		for _, ip := range private {
			for _, port := range []int{25, 80, 443, 6443} {
				if egressAllowed(nps, ns, processorLabels(), addr(ip), "TCP", port) {
					t.Errorf("processor: %s:%d allowed", ip, port)
				}
			}
		}
		// Unconfigured and not looked up (no cluster at render), the
		// Kubernetes API and the external Redis are closed (issue 26: they
		// were open on every address but link-local), and NOTES.txt says
		// which values open them.
		for name, labels := range pods {
			for _, dst := range []string{"10.96.0.1:443", "172.18.0.2:6443", "10.4.4.4:6379", "93.184.216.34:6379"} {
				ip, port, _ := strings.Cut(dst, ":")
				p := map[string]int{"443": 443, "6443": 6443, "6379": 6379}[port]
				if egressAllowed(nps, ns, labels, addr(ip), "TCP", p) {
					t.Errorf("%s: %s allowed with nothing known of the Kubernetes API and Redis", name, dst)
				}
			}
			// NAT64, 6to4 and Teredo addresses carry an IPv4 address
			// (here 10.0.0.1) that a translator or relay would reach.
			for _, ip := range []string{"64:ff9b::a00:1", "2002:a00:1::1", "2001:0:4136:e378:8000:63bf:f5ff:fffe"} {
				if egressAllowed(nps, ns, labels, addr(ip), "TCP", 443) {
					t.Errorf("%s: the IPv6 transition address %s allowed", name, ip)
				}
			}
		}
		notes := r.notes
		for _, want := range []string{"networkPolicy.kubeAPI.cidrs", "redis.networkPolicyCIDRs"} {
			if !strings.Contains(notes, want) {
				t.Errorf("NOTES.txt does not tell to set %s:\n%s", want, notes)
			}
		}
		// The policies are in the chart's ConfigMap's company: no
		// allowance by default.
		if _, ok := asMap(r.get(t, "ConfigMap", "bulkd-config").Object["data"])["BULKD_OUTBOUND_ALLOW_CIDRS"]; ok {
			t.Error("BULKD_OUTBOUND_ALLOW_CIDRS set by default")
		}
		if _, ok := envOf(containers(t, r.get(t, "Deployment", "bulkd-apiserver"))[0])["BULKD_TRUSTED_PROXIES"]; ok {
			t.Error("BULKD_TRUSTED_PROXIES set by default")
		}
	})

	t.Run("closed", func(t *testing.T) {
		r := renderOK(t, `
redis: {server: {enabled: true, password: test-password}}
spamd: {server: {image: {repository: registry.example/spamassassin, tag: "4.0.1"}}}
networkPolicy:
  kubeAPI: {cidrs: [10.96.0.1/32, 172.18.0.2/32], ports: [443, 6443]}
  allowEgress: [{cidrs: [10.20.0.0/16], ports: [8443]}, {cidrs: ["fd12:3456::/64"]}]
outbound: {allowCIDRs: [10.20.0.0/16, "fd12:3456::/64"]}
trustedProxies: [10.0.0.0/8, "fd00::/8"]
`)
		nps := policies(t, r)
		if len(nps) != 5 {
			t.Fatalf("%d NetworkPolicies, want apiserver, controller, processor, redis, spamd: %s", len(nps), r.names())
		}
		api, ctl := podLabels(t, r.get(t, "Deployment", "bulkd-apiserver")), podLabels(t, r.get(t, "Deployment", "bulkd-controller"))
		proc := processorLabels()
		redisPod := endpoint{pod: podLabels(t, r.get(t, "StatefulSet", "bulkd-redis")), ns: ns}
		spamdPod := endpoint{pod: podLabels(t, r.get(t, "Deployment", "bulkd-spamd")), ns: ns}
		apiPod, ctlPod, procPod := endpoint{pod: api, ns: ns}, endpoint{pod: ctl, ns: ns}, endpoint{pod: proc, ns: ns}
		for name, labels := range map[string]map[string]string{"apiserver": api, "controller": ctl, "processor": proc} {
			for _, ip := range private {
				for _, port := range []int{25, 80, 443, 6379, 6443, 8443} {
					if egressAllowed(nps, ns, labels, addr(ip), "TCP", port) {
						t.Errorf("%s: %s:%d allowed", name, ip, port)
					}
				}
			}
			if !egressAllowed(nps, ns, labels, redisPod, "TCP", 6379) {
				t.Errorf("%s: the chart's Redis refused", name)
			}
			if egressAllowed(nps, ns, labels, addr("10.4.4.4"), "TCP", 6379) || egressAllowed(nps, ns, labels, pub4, "TCP", 6379) {
				t.Errorf("%s: Redis' port open to other addresses", name)
			}
			// The operator's allowances.
			if !egressAllowed(nps, ns, labels, addr("10.20.3.4"), "TCP", 8443) || egressAllowed(nps, ns, labels, addr("10.20.3.4"), "TCP", 22) ||
				!egressAllowed(nps, ns, labels, addr("fd12:3456::9"), "TCP", 2525) {
				t.Errorf("%s: allowEgress not as given", name)
			}
			wantAPI := name != "processor"
			for _, dst := range []string{"10.96.0.1:443", "172.18.0.2:6443"} {
				ip, port, _ := strings.Cut(dst, ":")
				p := map[string]int{"443": 443, "6443": 6443}[port]
				if got := egressAllowed(nps, ns, labels, addr(ip), "TCP", p); got != wantAPI {
					t.Errorf("%s: Kubernetes API %s allowed=%v, want %v", name, dst, got, wantAPI)
				}
			}
			if got := egressAllowed(nps, ns, labels, spamdPod, "TCP", 783); got != (name == "apiserver") {
				t.Errorf("%s: spamd allowed=%v", name, got)
			}
		}
		// Redis: only bulkd's pods, and it reaches nothing.
		redis := redisPod.pod
		for _, from := range []endpoint{apiPod, ctlPod, procPod} {
			if !ingressAllowed(nps, ns, redis, from, 6379) {
				t.Errorf("Redis refuses %v", from.pod)
			}
		}
		elsewhere := apiPod
		elsewhere.ns = "another-namespace"
		for _, from := range []endpoint{spamdPod, elsewhere, {pod: map[string]string{"app": "x"}, ns: ns}, addr("10.1.2.3"), pub4} {
			if ingressAllowed(nps, ns, redis, from, 6379) {
				t.Errorf("Redis admits %+v", from)
			}
		}
		if egressAllowed(nps, ns, redis, pub4, "TCP", 443) || egressAllowed(nps, ns, redis, kubeDNS, "UDP", 53) {
			t.Error("Redis may connect out")
		}
		// spamd: only the API's checks; localOnly: no egress at all.
		if !ingressAllowed(nps, ns, spamdPod.pod, apiPod, 783) {
			t.Error("spamd refuses the API")
		}
		for _, from := range []endpoint{ctlPod, procPod, redisPod, addr("10.1.2.3")} {
			if ingressAllowed(nps, ns, spamdPod.pod, from, 783) {
				t.Errorf("spamd admits %+v", from)
			}
		}
		if egressAllowed(nps, ns, spamdPod.pod, pub4, "TCP", 80) || egressAllowed(nps, ns, spamdPod.pod, kubeDNS, "UDP", 53) {
			t.Error("a localOnly spamd may connect out")
		}
		// The app's own policy and the throttle's proxies.
		if got := nestedString(t, r.get(t, "ConfigMap", "bulkd-config"), "data", "BULKD_OUTBOUND_ALLOW_CIDRS"); got != "10.20.0.0/16,fd12:3456::/64" {
			t.Errorf("BULKD_OUTBOUND_ALLOW_CIDRS = %q", got)
		}
		if got := envOf(containers(t, r.get(t, "Deployment", "bulkd-apiserver"))[0])["BULKD_TRUSTED_PROXIES"]["value"]; got != "10.0.0.0/8,fd00::/8" {
			t.Errorf("BULKD_TRUSTED_PROXIES = %v", got)
		}
		// spamd with network tests may resolve names, nothing more.
		r2 := renderOK(t, `spamd: {server: {image: {repository: registry.example/spamassassin}, localOnly: false}}`)
		nps2 := policies(t, r2)
		sp := podLabels(t, r2.get(t, "Deployment", "bulkd-spamd"))
		if !egressAllowed(nps2, ns, sp, kubeDNS, "UDP", 53) || egressAllowed(nps2, ns, sp, pub4, "TCP", 443) {
			t.Error("spamd without localOnly: DNS only")
		}
	})

	t.Run("external services", func(t *testing.T) {
		r := renderOK(t, `
redis: {url: "rediss://:pw@redis.example.com:6380/1"}
spamd: {address: "spamd.mail.svc:7830"}
networkPolicy:
  spamd: {cidrs: [10.7.0.0/24]}
`)
		nps := policies(t, r)
		api := podLabels(t, r.get(t, "Deployment", "bulkd-apiserver"))
		// A Redis named by DNS outside the cluster, its address not given:
		// closed, never "any address on its port".
		if egressAllowed(nps, ns, api, addr("10.9.9.9"), "TCP", 6380) || egressAllowed(nps, ns, api, pub4, "TCP", 6380) {
			t.Error("an external Redis of unknown address is reachable")
		}
		r = renderOK(t, `{redis: {url: "rediss://:pw@redis.example.com:6380/1", networkPolicyCIDRs: [10.9.9.9/32]}}`)
		nps = policies(t, r)
		if !egressAllowed(nps, ns, api, addr("10.9.9.9"), "TCP", 6380) || egressAllowed(nps, ns, api, addr("10.9.9.9"), "TCP", 6379) ||
			egressAllowed(nps, ns, api, addr("10.9.9.10"), "TCP", 6380) {
			t.Error("redis.networkPolicyCIDRs: not exactly its addresses on redis.url's port")
		}
		// An address in the URL is the address.
		r = renderOK(t, `{redis: {url: "redis://10.3.3.3:6379/0"}}`)
		nps = policies(t, r)
		if !egressAllowed(nps, ns, processorLabels(), addr("10.3.3.3"), "TCP", 6379) || egressAllowed(nps, ns, processorLabels(), addr("10.3.3.4"), "TCP", 6379) {
			t.Error("redis.url's IP address is not the Redis rule")
		}
		r = renderOK(t, `{spamd: {address: "spamd.mail.svc:7830"}, networkPolicy: {spamd: {cidrs: [10.7.0.0/24]}}}`)
		nps = policies(t, r)
		if !egressAllowed(nps, ns, api, addr("10.7.0.5"), "TCP", 7830) || egressAllowed(nps, ns, api, addr("10.8.0.5"), "TCP", 7830) {
			t.Error("the external spamd rule is not spamd.address' port on networkPolicy.spamd.cidrs")
		}
		if egressAllowed(nps, ns, processorLabels(), addr("10.7.0.5"), "TCP", 7830) {
			t.Error("processors may reach spamd")
		}
		r = renderOK(t, `{redis: {existingSecret: s, url: ""}, networkPolicy: {redis: {cidrs: [10.9.0.0/16], ports: [7000, 7001]}}}`)
		nps = policies(t, r)
		if !egressAllowed(nps, ns, processorLabels(), addr("10.9.1.1"), "TCP", 7001) || egressAllowed(nps, ns, processorLabels(), addr("10.8.1.1"), "TCP", 7001) {
			t.Error("networkPolicy.redis not applied")
		}
	})

	t.Run("disabled", func(t *testing.T) {
		r := renderOK(t, `{networkPolicy: {enabled: false}, redis: {server: {enabled: true, password: x}}}`)
		if n := len(r.ofKind("NetworkPolicy")); n != 0 {
			t.Errorf("%d NetworkPolicies with networkPolicy.enabled=false", n)
		}
	})

	// helm install: the Kubernetes API's addresses are looked up (here:
	// envtest's API server), so the API and the controller reach it and
	// no other private address.
	t.Run("kube API looked up", func(t *testing.T) {
		var slice discoveryv1.EndpointSlice
		if err := c.Get(context.Background(), client.ObjectKey{Namespace: "default", Name: "kubernetes"}, &slice); err != nil {
			t.Fatalf("EndpointSlice default/kubernetes: %v", err)
		}
		if len(slice.Endpoints) == 0 || len(slice.Endpoints[0].Addresses) == 0 || len(slice.Ports) == 0 || slice.Ports[0].Port == nil {
			t.Fatalf("EndpointSlice default/kubernetes: %+v", slice)
		}
		epIP, epPort := slice.Endpoints[0].Addresses[0], int(*slice.Ports[0].Port)
		r, err := renderWith(t, "bulkd", ns, parseValues(t, ""), k8sConfig)
		if err != nil {
			t.Fatal(err)
		}
		dryRunApply(t, c, r.objs)
		nps := policies(t, r)
		for _, d := range []string{"bulkd-apiserver", "bulkd-controller"} {
			labels := podLabels(t, r.get(t, "Deployment", d))
			if !egressAllowed(nps, ns, labels, addr(epIP), "TCP", epPort) {
				t.Errorf("%s: the looked-up Kubernetes API %s:%d refused", d, epIP, epPort)
			}
			for _, ip := range []string{"10.1.2.3", "172.18.0.2", "192.168.9.9"} {
				if egressAllowed(nps, ns, labels, addr(ip), "TCP", 443) || egressAllowed(nps, ns, labels, addr(ip), "TCP", epPort) {
					t.Errorf("%s: %s allowed on the API's ports although the API was looked up", d, ip)
				}
			}
		}
		t.Logf("Kubernetes API looked up: %s:%d", epIP, epPort)
	})

	// helm install with the default redis.url (a Service "redis" in the
	// release's namespace): its pods and its cluster IP, looked up.
	t.Run("redis Service looked up", func(t *testing.T) {
		svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "redis"},
			Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "my-redis"},
				Ports: []corev1.ServicePort{{Port: 6379}}}}
		if err := c.Create(context.Background(), svc); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Delete(context.Background(), svc) })
		r, err := renderWith(t, "bulkd", ns, parseValues(t, ""), k8sConfig)
		if err != nil {
			t.Fatal(err)
		}
		dryRunApply(t, c, r.objs)
		nps := policies(t, r)
		redisPod := endpoint{pod: map[string]string{"app": "my-redis"}, ns: ns, nsTags: map[string]string{"kubernetes.io/metadata.name": ns}}
		other := endpoint{pod: map[string]string{"app": "other"}, ns: ns, nsTags: map[string]string{"kubernetes.io/metadata.name": ns}}
		for _, labels := range []map[string]string{podLabels(t, r.get(t, "Deployment", "bulkd-apiserver")), processorLabels()} {
			if !egressAllowed(nps, ns, labels, redisPod, "TCP", 6379) || !egressAllowed(nps, ns, labels, addr(svc.Spec.ClusterIP), "TCP", 6379) {
				t.Errorf("the looked-up Redis (pods app=my-redis, %s) refused", svc.Spec.ClusterIP)
			}
			if egressAllowed(nps, ns, labels, other, "TCP", 6379) || egressAllowed(nps, ns, labels, addr("10.4.4.4"), "TCP", 6379) {
				t.Error("Redis' port open beyond the looked-up Service")
			}
		}
		if strings.Contains(r.notes, "redis.networkPolicyCIDRs") {
			t.Error("NOTES.txt warns of an unknown Redis although it was looked up")
		}
	})
}

// The /tmp emptyDir of every pod the chart runs has a size limit.
func TestTmpSizeLimit(t *testing.T) {
	r, err := render(t, "bulkd", "default", parseValues(t, `{tmpSizeLimit: 300Mi, spamd: {server: {image: {repository: x/spamd}}}}`))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, o := range append(r.ofKind("Deployment"), r.ofKind("StatefulSet")...) {
		for _, v := range asSlice(nested(t, o, "spec", "template", "spec", "volumes")) {
			ed, ok := asMap(v)["emptyDir"]
			if !ok {
				continue
			}
			n++
			if got := asMap(ed)["sizeLimit"]; got != "300Mi" {
				t.Errorf("%s: emptyDir %v without the size limit (%v)", o.GetName(), asMap(v)["name"], got)
			}
		}
	}
	if n != 3 {
		t.Errorf("%d emptyDirs, want 3 (apiserver, controller, spamd)", n)
	}
}
