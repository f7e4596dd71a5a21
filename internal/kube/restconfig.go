package kube

import (
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
)

// RESTConfig is the Kubernetes client configuration: the kubeconfig file
// when one is given, else in-cluster or $KUBECONFIG.
//
// Either way without client-go's client-side rate limit, as
// ctrl.GetConfig gives it: the API server's priority and fairness is the
// limit. A kubeconfig file alone would get client-go's default of 5
// requests a second (burst 10): a controller started with --kubeconfig
// (hack/kube-bench does) would be paced far below one in a pod.
func RESTConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig == "" {
		return ctrl.GetConfig()
	}
	rc, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, err
	}
	if rc.QPS == 0 {
		rc.QPS = -1
	}
	return rc, nil
}
