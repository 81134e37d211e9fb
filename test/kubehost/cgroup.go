package kubehost

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// RemoveCgroupTree kills what still runs in the cgroup tree dir (each one
// a leak: the pods should be gone) and removes it, children first; it
// returns the leaks, each logged.
func RemoveCgroupTree(log *slog.Logger, dir string) int {
	leaks := 0
	var tree []string
	filepath.WalkDir(dir, func(p string, de os.DirEntry, err error) error {
		if err != nil || !de.IsDir() {
			return nil
		}
		tree = append(tree, p)
		data, _ := os.ReadFile(filepath.Join(p, "cgroup.procs"))
		for _, f := range strings.Fields(string(data)) {
			if pid, err := strconv.Atoi(f); err == nil {
				cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
				log.Error("LEAK: process still in a kubelet cgroup: killed", "pid", pid, "cgroup", p, "cmdline", strings.ReplaceAll(string(cmd), "\x00", " "))
				leaks++
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		return nil
	})
	slices.Reverse(tree)
	for _, p := range tree {
		var err error
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			if err = os.Remove(p); err == nil || os.IsNotExist(err) || time.Now().After(deadline) {
				break
			}
		}
		if err != nil && !os.IsNotExist(err) {
			log.Error("LEAK: could not remove cgroup", "cgroup", p, "error", err)
			leaks++
		}
	}
	return leaks
}

// RemoveCgroupPath removes the cgroup path, as a kubelet names it
// ("/kubelet-test"), from every hierarchy it exists in, as
// RemoveCgroupTree does; it returns the leaks.
func RemoveCgroupPath(log *slog.Logger, path string) int {
	if path == "" || path == "/" {
		return 0
	}
	leaks := 0
	for _, d := range CgroupDirs(path) {
		leaks += RemoveCgroupTree(log, d)
	}
	return leaks
}

// CgroupDirs lists the cgroup path in every hierarchy where it exists
// (each v1 one, and the root of a unified-only host).
func CgroupDirs(path string) []string {
	dirs, _ := filepath.Glob("/sys/fs/cgroup/*" + path)
	if st, err := os.Stat("/sys/fs/cgroup" + path); err == nil && st.IsDir() {
		dirs = append(dirs, "/sys/fs/cgroup"+path)
	}
	return dirs
}
