//go:build e2ecluster

package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestNetworkPoliciesEnforced proves the chart's NetworkPolicies on a cluster that enforces
// them: kube-network-policies (hack/local-cluster/netpol.sh, built from the Go module proxy)
// decides every new connection of a pod. A pod labelled as the controller labels processor
// pods (so the chart's processor policy selects it) cannot reach a pod in another namespace
// nor the cloud metadata address 169.254.169.254 (a routed listener, netpol.sh), while a pod
// of that other namespace, which no policy selects, reaches both (so the refusals are the
// policy's, not the network's); and the API pod reaches Redis. Each connection is made from
// the pod's own network namespace (found by its address under /run/netns), by this test,
// which runs as root in the cluster's namespace: no tool is needed in the images.
func TestNetworkPoliciesEnforced(t *testing.T) {
	switch os.Getenv("E2E_NETPOL") {
	case "0":
		t.Skip("E2E_NETPOL=0: NetworkPolicies are not enforced in this run")
	case "failed":
		t.Fatal("kube-network-policies did not come up (hack/local-cluster/netpol.sh; its log in the cluster's logs)")
	}
	ctx := context.Background()
	other := fmt.Sprintf("np-other-%d", time.Now().Unix()%100000)
	if _, err := h.cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: other}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.cs.CoreV1().Namespaces().Delete(context.Background(), other, metav1.DeleteOptions{}) })

	target := pausePod(t, other, "target", nil)
	free := pausePod(t, other, "free", nil)
	proc := pausePod(t, h.ns, "np-probe-processor", map[string]string{
		"app.kubernetes.io/name": "bulkd", "app.kubernetes.io/component": "processor", "app.kubernetes.io/managed-by": "bulkd-controller",
	})
	t.Cleanup(func() { _ = h.cs.CoreV1().Pods(h.ns).Delete(context.Background(), proc.Name, metav1.DeleteOptions{}) })

	// A listener in the target pod's network namespace.
	var ln net.Listener
	if err := inPodNetns(t, target.Status.PodIP, func() (err error) { ln, err = net.Listen("tcp", ":8080"); return err }); err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	}()
	targetAddr := net.JoinHostPort(target.Status.PodIP, "8080")
	const metadata = "169.254.169.254:80"

	// The enforcer learns new pods from the API server: a connection may pass before it
	// knows the probe pod. Refusals must hold from then on.
	waitFor(t, 30*time.Second, "the free pod reaches the target and the metadata address", func() bool {
		return dialFrom(t, free.Status.PodIP, targetAddr) == nil && dialFrom(t, free.Status.PodIP, metadata) == nil
	})
	start := time.Now()
	waitFor(t, 30*time.Second, "the processor pod refused twice in a row", func() bool {
		return dialFrom(t, proc.Status.PodIP, targetAddr) != nil && dialFrom(t, proc.Status.PodIP, targetAddr) != nil
	})
	t.Logf("processor pod refused after %v", time.Since(start).Round(time.Millisecond))
	for i := range 3 {
		if err := dialFrom(t, proc.Status.PodIP, targetAddr); err == nil {
			t.Errorf("attempt %d: the processor pod reached a pod in namespace %s (%s)", i, other, targetAddr)
		}
		if err := dialFrom(t, proc.Status.PodIP, metadata); err == nil {
			t.Errorf("attempt %d: the processor pod reached %s", i, metadata)
		}
	}
	// The same destinations stay open to a pod no policy selects.
	if err := dialFrom(t, free.Status.PodIP, targetAddr); err != nil {
		t.Errorf("the free pod no longer reaches the target: %v", err)
	}

	// The API pod reaches Redis.
	redisAddr := strings.TrimSuffix(strings.TrimPrefix(h.redisURL, "redis://"), "/0")
	pods, err := h.cs.CoreV1().Pods(h.ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=apiserver"})
	if err != nil || len(pods.Items) == 0 {
		t.Fatalf("API pods: %v (%d)", err, len(pods.Items))
	}
	for _, p := range pods.Items {
		if err := dialFrom(t, p.Status.PodIP, redisAddr); err != nil {
			t.Errorf("API pod %s cannot reach Redis at %s: %v", p.Name, redisAddr, err)
		}
	}
}

// pausePod runs the local pause image in namespace ns and returns it once it has an address.
func pausePod(t *testing.T, ns, name string, labels map[string]string) *corev1.Pod {
	t.Helper()
	ctx := context.Background()
	zero := int64(0)
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels},
		Spec: corev1.PodSpec{
			TerminationGracePeriodSeconds: &zero,
			Containers:                    []corev1.Container{{Name: "pause", Image: "localhost/pause:3.10-local", ImagePullPolicy: corev1.PullNever}},
		},
	}
	if _, err := h.cs.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var got *corev1.Pod
	waitFor(t, 60*time.Second, "pod "+ns+"/"+name+" running", func() bool {
		q, err := h.cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil || q.Status.Phase != corev1.PodRunning || q.Status.PodIP == "" {
			return false
		}
		got = q
		return true
	})
	return got
}

// dialFrom connects to addr from the network namespace of the pod with address ip (3 s).
func dialFrom(t *testing.T, ip, addr string) error {
	t.Helper()
	return inPodNetns(t, ip, func() error {
		c, err := net.DialTimeout("tcp", addr, 3*time.Second)
		if err != nil {
			return err
		}
		return c.Close()
	})
}

// inPodNetns runs fn on a thread in the network namespace that holds address ip (one of
// containerd's /run/netns/cni-*). Sockets fn makes stay in that namespace. The thread is
// never given back to the runtime (it ends with its goroutine), so no goroutine runs in a
// pod's namespace by accident.
func inPodNetns(t *testing.T, ip string, fn func() error) error {
	t.Helper()
	paths, _ := filepath.Glob("/run/netns/cni-*")
	for _, p := range paths {
		hit := false
		err := inNetns(p, func() error {
			addrs, err := net.InterfaceAddrs()
			for _, a := range addrs {
				if n, ok := a.(*net.IPNet); ok && n.IP.String() == ip {
					hit = true
				}
			}
			if hit {
				return fn()
			}
			return err
		})
		if hit {
			return err
		}
	}
	return errors.New("no network namespace under /run/netns holds " + ip)
}

func inNetns(path string, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // not unlocked: the thread exits with this goroutine
		f, err := os.Open(path)
		if err != nil {
			errc <- err
			return
		}
		defer f.Close()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("setns %s: %w", path, err)
			return
		}
		errc <- fn()
	}()
	return <-errc
}
