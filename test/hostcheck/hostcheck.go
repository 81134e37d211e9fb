// Package hostcheck finds and removes what a run of a runtime left on this
// host: processes, mounts, pods. The harnesses that start a runtime on temp
// roots (test/conformance/critest, test/conformance/nodee2e, bench/density) check the same
// things after it stops; a find is a leak to them.
package hostcheck

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/moby/sys/mountinfo"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Procs lists the processes, other than this one, for which match says
// true of their NUL-separated command line and their /proc/PID/cgroup text.
func Procs(match func(cmdline, cgroup string) bool) []int {
	var pids []int
	self := os.Getpid()
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		cmd, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil || len(cmd) == 0 { // gone, or a kernel thread
			continue
		}
		cg, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
		if match(string(cmd), string(cg)) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// ProcsNaming lists the processes whose command line contains dir: the
// daemons, monitors and shims of a runtime on temp roots all name them.
func ProcsNaming(dir string) []int {
	return Procs(func(cmdline, _ string) bool { return strings.Contains(cmdline, dir) })
}

// Cmdline is pid's command line with spaces for NULs, for a report.
func Cmdline(pid int) string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return strings.TrimSpace(strings.ReplaceAll(string(b), "\x00", " "))
}

// MountsUnder lists the mount points at or under any of dirs, deepest
// first (the order to unmount them in), each once.
func MountsUnder(dirs ...string) []string {
	mounts, err := mountinfo.GetMounts(func(m *mountinfo.Info) (skip, stop bool) {
		for _, d := range dirs {
			if m.Mountpoint == d || strings.HasPrefix(m.Mountpoint, d+"/") {
				return false, false
			}
		}
		return true, false
	})
	if err != nil {
		return nil
	}
	out := make([]string, 0, len(mounts))
	for _, m := range mounts {
		out = append(out, m.Mountpoint)
	}
	slices.SortFunc(out, func(a, b string) int { return len(b) - len(a) })
	return slices.Compact(out)
}

// Dial connects to a CRI endpoint ("unix:///path").
func Dial(endpoint string) (*grpc.ClientConn, error) {
	return grpc.NewClient(endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()))
}

// Ping asks the runtime at endpoint for its version, waiting 2 s at most.
func Ping(ctx context.Context, endpoint string) error {
	conn, err := Dial(endpoint)
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	_, err = runtimeapi.NewRuntimeServiceClient(conn).Version(ctx, &runtimeapi.VersionRequest{})
	return err
}

// RemovePods removes every container and pod sandbox the runtime at
// endpoint still has (containers first, so a pod's removal never waits on
// one) and returns how many it found; a removal that fails is logged as a
// LEAK and counted in failed.
func RemovePods(ctx context.Context, log *slog.Logger, endpoint string) (found, failed int) {
	conn, err := Dial(endpoint)
	if err != nil {
		log.Error("LEAK: connect to the runtime to remove what is left", "endpoint", endpoint, "error", err)
		return 0, 1
	}
	defer conn.Close()
	rt := runtimeapi.NewRuntimeServiceClient(conn)
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	fail := func(what, id string, err error) {
		log.Error("LEAK: "+what, "id", id, "error", err)
		failed++
	}
	cs, err := rt.ListContainers(ctx, &runtimeapi.ListContainersRequest{})
	if err != nil {
		fail("list containers", "", err)
		return 0, failed
	}
	for _, c := range cs.Containers {
		found++
		if _, err := rt.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: c.Id}); err != nil {
			fail("remove container", c.Id, err)
		}
	}
	ps, err := rt.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		fail("list pod sandboxes", "", err)
		return found, failed
	}
	for _, p := range ps.Items {
		found++
		if _, err := rt.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: p.Id}); err != nil {
			fail("stop pod sandbox", p.Id, err)
			continue
		}
		if _, err := rt.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: p.Id}); err != nil {
			fail("remove pod sandbox", p.Id, err)
		}
	}
	return found, failed
}

// PortsFree checks that nothing listens on any of the TCP ports, which a
// run's components bind at fixed numbers.
func PortsFree(ports ...int) error {
	for _, p := range ports {
		l, err := net.Listen("tcp", ":"+strconv.Itoa(p))
		if err != nil {
			return fmt.Errorf("TCP port %d is taken: %w", p, err)
		}
		l.Close()
	}
	return nil
}
