package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/berth-runtime/berth/test/hostcheck"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// The suite runs with --stop-services=false: left to itself it kills the
// kubelet the moment the last spec ends, while the kubelet is still tearing
// down the pods of the last specs' namespaces (a downward-api tmpfs under
// /var/lib/kubelet/pods was left so). This program stops the suite's
// services itself, after the kubelet has had the time to finish.

// drainTimeout bounds the wait for the kubelet to tear down what the
// specs left; what it has not torn down by then is reported by the host
// restore as a leak.
const drainTimeout = 3 * time.Minute

// A state that lasts this long is taken as settled: between the namespace
// controller deleting a pod and the kubelet starting on it, nothing shows.
const drainSettle = 5 * time.Second

// stopServices waits (bounded) until the runtime has no ready pod sandbox
// and no volume is mounted under the kubelet's pods dir, then stops the
// suite's kubelet and its services process (API server, etcd, namespace
// controller): the processes of those names whose command lines name work.
// An interrupted run (ctx done) waits 20 s at most.
func stopServices(ctx context.Context, log *slog.Logger, endpoint, work string) {
	kubelet := func() []int { return procsRunning("kubelet", work, "") }
	if len(kubelet()) > 0 {
		start := time.Now()
		limit := drainTimeout
		if ctx.Err() != nil {
			limit = 20 * time.Second
		}
		busy, settled := "", time.Time{}
		for deadline := start.Add(limit); ; time.Sleep(time.Second) {
			b := kubeletBusy(endpoint)
			if b != busy {
				busy, settled = b, time.Now()
			}
			if busy == "" && time.Since(settled) >= drainSettle {
				log.Info("the kubelet tore the pods down", "after", time.Since(start).Round(time.Second))
				break
			}
			if time.Now().After(deadline) || len(kubelet()) == 0 {
				log.Warn("stopping the kubelet before it tore everything down", "after", time.Since(start).Round(time.Second), "left", busy)
				break
			}
		}
	}
	terminate(log, "kubelet", kubelet())
	terminate(log, "services", procsRunning("e2e_node.test", work, "--run-services-mode"))
}

// kubeletBusy says what the kubelet still has to tear down ("" if nothing):
// ready pod sandboxes, mounts under /var/lib/kubelet/pods.
func kubeletBusy(endpoint string) string {
	var left []string
	if n, err := readySandboxes(endpoint); err != nil {
		left = append(left, "sandboxes: "+err.Error())
	} else if n > 0 {
		left = append(left, fmt.Sprintf("%d ready pod sandboxes", n))
	}
	if m := hostcheck.MountsUnder("/var/lib/kubelet/pods"); len(m) > 0 {
		left = append(left, fmt.Sprintf("%d mounts under /var/lib/kubelet/pods (%s ...)", len(m), m[0]))
	}
	return strings.Join(left, ", ")
}

func readySandboxes(endpoint string) (int, error) {
	conn, err := hostcheck.Dial(endpoint)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := runtimeapi.NewRuntimeServiceClient(conn).ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{
		Filter: &runtimeapi.PodSandboxFilter{State: &runtimeapi.PodSandboxStateValue{State: runtimeapi.PodSandboxState_SANDBOX_READY}},
	})
	if err != nil {
		return 0, err
	}
	return len(resp.Items), nil
}

// terminate sends SIGTERM to pids and waits for them to exit, SIGKILL after
// 30 s. They are not this program's children (their parent, the suite's
// first test process, has exited): exited means gone or a zombie.
func terminate(log *slog.Logger, what string, pids []int) {
	for _, pid := range pids {
		syscall.Kill(pid, syscall.SIGTERM)
	}
	deadline := time.Now().Add(30 * time.Second)
	for _, pid := range pids {
		for alive(pid) {
			if time.Now().After(deadline) {
				log.Error("did not stop in 30s after SIGTERM: SIGKILL", "process", what, "pid", pid)
				syscall.Kill(pid, syscall.SIGKILL)
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	if len(pids) > 0 {
		log.Info("stopped", "process", what, "pids", pids)
	}
}

func alive(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// pid (comm) STATE ...: comm may hold spaces and parentheses.
	s := string(stat)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

// procsRunning lists live processes of the program name (argv[0]'s base
// name) whose command line contains work and, if arg is not "", that have
// arg among their arguments.
func procsRunning(name, work, arg string) []int {
	var pids []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmd, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil {
			continue
		}
		args := strings.Split(strings.TrimRight(string(cmd), "\x00"), "\x00")
		if filepath.Base(args[0]) != name || !strings.Contains(string(cmd), work) || arg != "" && !contains(args[1:], arg) || !alive(pid) {
			continue
		}
		pids = append(pids, pid)
	}
	return pids
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
