// Command pause is the sandbox ("pause") container of hack/local-cluster's
// node: it holds the pod's namespaces, reaps orphaned children (it is PID 1
// when the pod shares its PID namespace) and exits on SIGTERM or SIGINT.
// Built static (CGO_ENABLED=0) and packed with hack/image, so the local
// cluster needs no registry.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	for s := range sigs {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			var ws syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
