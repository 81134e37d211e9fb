// Command pause is the /pause of the test image published as
// registry.k8s.io/pause:3.9 and k8s.gcr.io/pause:3.9 in the offline test
// registry (hack/build-images). It does what an infra container's pause does:
// sleeps until SIGINT or SIGTERM, then exits 0, and reaps every child that
// is reparented to it when it is PID 1 of a PID namespace.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	if len(os.Args) == 2 && os.Args[1] == "-v" {
		fmt.Println("pause (berth test image)")
		return
	}
	if os.Getpid() != 1 {
		fmt.Fprintln(os.Stderr, "Warning: pause should be the first process")
	}
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for sig := range sigs {
		if sig != syscall.SIGCHLD {
			fmt.Fprintf(os.Stderr, "Shutting down, got signal: %v\n", sig)
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
