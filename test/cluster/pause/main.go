// Command pause is the pod sandbox ("pause") process of the test cluster:
// it holds the pod's namespaces open, reaps orphaned children (it is PID 1
// when a pod shares its process namespace) and exits 0 on SIGTERM or
// SIGINT. Built static by the harness and imported as
// localhost/knotless/pause:1.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sigs := make(chan os.Signal, 8)
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
