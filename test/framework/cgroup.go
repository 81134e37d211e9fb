package framework

import (
	"crypto/rand"
	"encoding/hex"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// RandHex returns n random bytes in hex: unique names for pods, cgroup
// parents and bridges of tests that run side by side.
func RandHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// CgroupV2 is true on a host with the unified hierarchy alone at
// /sys/fs/cgroup (no v1 controllers).
func CgroupV2() bool {
	var st unix.Statfs_t
	return unix.Statfs("/sys/fs/cgroup", &st) == nil && st.Type == unix.CGROUP2_SUPER_MAGIC
}

// CgroupRoots are the roots of every hierarchy: /sys/fs/cgroup itself on a
// v2 host; each v1 controller's (and named, and the hybrid's unified)
// hierarchy under it on a v1 host.
func CgroupRoots() []string {
	if CgroupV2() {
		return []string{"/sys/fs/cgroup"}
	}
	entries, _ := os.ReadDir("/sys/fs/cgroup")
	var out []string
	for _, e := range entries {
		if e.IsDir() {
			out = append(out, filepath.Join("/sys/fs/cgroup", e.Name()))
		}
	}
	return out
}

// CgroupFile is the path of an interface file of the cgroup at path (as a
// CRI cgroup parent names it, cgroupfs driver): v1's in the controller's
// hierarchy, v2's in the unified tree. The file names differ between the
// two (cpu.shares and cpu.weight), so both are given.
func CgroupFile(path, v1Controller, v1File, v2File string) string {
	if CgroupV2() {
		return filepath.Join("/sys/fs/cgroup", path, v2File)
	}
	return filepath.Join("/sys/fs/cgroup", v1Controller, path, v1File)
}

// ReadCgroupFile reads CgroupFile, trimmed; "" if it cannot be read.
func ReadCgroupFile(path, v1Controller, v1File, v2File string) string {
	b, _ := os.ReadFile(CgroupFile(path, v1Controller, v1File, v2File))
	return strings.TrimSpace(string(b))
}

// CgroupProcs is the cgroup.procs of the cgroup at path in the hierarchy
// that counts processes: pids on v1, the unified tree on v2.
func CgroupProcs(path string) string {
	return CgroupFile(path, "pids", "cgroup.procs", "cgroup.procs")
}

// RemoveCgroup removes the cgroup at path (as a CRI cgroup parent names
// it) and its empty descendants from every hierarchy; a cgroup that still
// holds processes stays, and is the caller's leak to report.
func RemoveCgroup(path string) {
	for _, root := range CgroupRoots() {
		removeCgroupDir(filepath.Join(root, path))
	}
}

func removeCgroupDir(dir string) {
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if e.IsDir() {
			removeCgroupDir(filepath.Join(dir, e.Name()))
		}
	}
	os.Remove(dir)
}

// CgroupDirs lists the directories below each parent (the parents
// themselves excluded) in every hierarchy.
func CgroupDirs(parents []string) []string {
	var out []string
	for _, root := range CgroupRoots() {
		for _, parent := range parents {
			top := filepath.Join(root, parent)
			_ = filepath.WalkDir(top, func(p string, e fs.DirEntry, err error) error {
				if err == nil && e.IsDir() && p != top {
					out = append(out, p)
				}
				return nil
			})
		}
	}
	return out
}
