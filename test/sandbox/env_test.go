package sandbox_test

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/network/cnitest"
	"github.com/berth-runtime/berth/test/framework"
)

// env is one test's daemon and network.
type env struct {
	t      *testing.T
	d      *framework.Daemon
	net    *cnitest.Net
	parent string // cgroup parent of the test's pods
}

// newEnv starts berth on a private bridge network. confDir, when set,
// replaces the network's conf dir (for configs that fail on purpose);
// binDirs likewise.
func newEnv(t *testing.T, opts ...func(*envOptions)) *env {
	t.Helper()
	framework.RequireRoot(t)
	o := envOptions{}
	for _, f := range opts {
		f(&o)
	}
	e := &env{t: t, net: cnitest.NewNet(t), parent: "/berth-e2e-" + framework.RandHex(4)}
	confDir := e.net.ConfDir
	bins := []string{e.net.BinDir}
	if o.prepare != nil {
		confDir, bins = o.prepare(e.net)
	}
	args := []string{"--cni-conf-dir", confDir}
	for _, b := range bins {
		args = append(args, "--cni-bin-dir", b)
	}
	e.d = framework.StartDaemon(t, framework.WithArgs(append(args, o.args...)...))
	// Registered after the daemon's own cleanup, so it runs before it:
	// pods go while berth still runs.
	t.Cleanup(e.cleanup)
	return e
}

type envOptions struct {
	prepare func(*cnitest.Net) (confDir string, binDirs []string)
	args    []string
}

func (e *env) cleanup() {
	if e.d.Running() {
		e.d.RemoveAllPods()
	}
	// Whatever still runs under the test's own cgroup parent is a pause
	// the daemon could not remove (it died, or the test broke it).
	procs := framework.CgroupProcs(e.parent)
	if pids, _ := os.ReadFile(procs); len(pids) > 0 {
		e.t.Errorf("cleanup: processes left under %s: %s", e.parent, pids)
	}
	killUnder(filepath.Dir(procs))
	framework.RemoveCgroup(e.parent)
}

// killUnder SIGKILLs every process in a cgroup tree.
func killUnder(dir string) {
	filepath.WalkDir(dir, func(p string, de os.DirEntry, err error) error {
		if err != nil || de.Name() != "cgroup.procs" {
			return nil
		}
		data, _ := os.ReadFile(p)
		for _, f := range strings.Fields(string(data)) {
			if pid, err := strconv.Atoi(f); err == nil {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		return nil
	})
	// rmdir needs the killed processes gone from the cgroup.
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		var n int
		filepath.WalkDir(dir, func(p string, de os.DirEntry, err error) error {
			if err == nil && de.Name() == "cgroup.procs" {
				data, _ := os.ReadFile(p)
				n += len(strings.Fields(string(data)))
			}
			return nil
		})
		if n == 0 {
			return
		}
	}
}

func (e *env) config(name string) *runtimeapi.PodSandboxConfig {
	return &runtimeapi.PodSandboxConfig{
		Metadata: &runtimeapi.PodSandboxMetadata{Name: name, Namespace: "e2e", Uid: "uid-" + name + "-" + framework.RandHex(3)},
		Hostname: name,
		Labels:   map[string]string{"app": name},
		Linux:    &runtimeapi.LinuxPodSandboxConfig{CgroupParent: e.parent},
	}
}

func (e *env) run(cfg *runtimeapi.PodSandboxConfig) string {
	e.t.Helper()
	resp, err := e.d.Runtime.RunPodSandbox(framework.Ctx(e.t), &runtimeapi.RunPodSandboxRequest{Config: cfg})
	if err != nil {
		e.t.Fatalf("RunPodSandbox %s: %v", cfg.Metadata.Name, err)
	}
	return resp.PodSandboxId
}

// podInfo is the verbose part of PodSandboxStatus.
type podInfo struct {
	Pid        int    `json:"pid"`
	NetNS      string `json:"netNamespacePath"`
	CgroupPath string `json:"cgroupPath"`
	Dir        string `json:"stateDir"`
}

func (e *env) status(id string) (*runtimeapi.PodSandboxStatus, podInfo) {
	e.t.Helper()
	resp, err := e.d.Runtime.PodSandboxStatus(framework.Ctx(e.t), &runtimeapi.PodSandboxStatusRequest{PodSandboxId: id, Verbose: true})
	if err != nil {
		e.t.Fatalf("PodSandboxStatus %s: %v", id, err)
	}
	var info podInfo
	if err := json.Unmarshal([]byte(resp.Info["info"]), &info); err != nil {
		e.t.Fatalf("verbose info %q: %v", resp.Info["info"], err)
	}
	return resp.Status, info
}

func (e *env) stop(id string) {
	e.t.Helper()
	if _, err := e.d.Runtime.StopPodSandbox(framework.Ctx(e.t), &runtimeapi.StopPodSandboxRequest{PodSandboxId: id}); err != nil {
		e.t.Fatalf("StopPodSandbox %s: %v", id, err)
	}
}

func (e *env) remove(id string) {
	e.t.Helper()
	if _, err := e.d.Runtime.RemovePodSandbox(framework.Ctx(e.t), &runtimeapi.RemovePodSandboxRequest{PodSandboxId: id}); err != nil {
		e.t.Fatalf("RemovePodSandbox %s: %v", id, err)
	}
}

// leftovers lists what of pod id (with cgroup cg) is still on the host:
// files under the state root, mounts, cgroup directories, leases.
func (e *env) leftovers(id, cg string) []string {
	var left []string
	filepath.WalkDir(e.d.State, func(p string, de os.DirEntry, err error) error {
		if err == nil && strings.Contains(de.Name(), id) {
			left = append(left, p)
		}
		return nil
	})
	mounts, _ := os.ReadFile("/proc/self/mountinfo")
	for _, line := range strings.Split(string(mounts), "\n") {
		if strings.Contains(line, id) {
			left = append(left, "mount: "+line)
		}
	}
	if cg != "" {
		for _, root := range framework.CgroupRoots() {
			if _, err := os.Stat(filepath.Join(root, cg)); err == nil {
				left = append(left, filepath.Join(root, cg))
			}
		}
	}
	return left
}

func inSubnet(t *testing.T, subnet *net.IPNet, ip string) net.IP {
	t.Helper()
	parsed := net.ParseIP(ip)
	if parsed == nil || !subnet.Contains(parsed) {
		t.Fatalf("pod IP %q is not in %s", ip, subnet)
	}
	return parsed
}

// nsInode identifies a namespace by the inode of its nsfs file (a
// /proc/<pid>/ns link or a pin).
func nsInode(path string) string {
	st, err := os.Stat(path)
	if err != nil {
		return fmt.Sprintf("unreadable %s: %v", path, err)
	}
	return fmt.Sprint(st.Sys().(*syscall.Stat_t).Ino)
}
