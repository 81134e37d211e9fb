package framework

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"path/filepath"
)

// RandHex returns n random bytes in hex: unique names for pods, cgroup
// parents and bridges of tests that run side by side.
func RandHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// RemoveCgroup removes the cgroup at path (as a CRI cgroup parent names
// it) and its empty descendants from every hierarchy; a cgroup that still
// holds processes stays, and is the caller's leak to report.
func RemoveCgroup(path string) {
	dirs, _ := filepath.Glob("/sys/fs/cgroup/*" + path)
	for _, d := range dirs {
		removeCgroupDir(d)
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
