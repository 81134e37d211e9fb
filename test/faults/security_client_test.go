package faults_test

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/berth-runtime/berth/test/framework"
)

// The users a client runs as: nobody, and a uid and gid no group of the
// host's names (so no socket_group can let it in by accident).
const (
	secNobody   = 65534
	secStranger = 4321
)

// secCrictlAs runs crictl against socket as uid and gid with the given
// supplementary groups (none when nil) and returns its combined output.
func secCrictlAs(t *testing.T, socket string, uid, gid uint32, groups []uint32, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	args = append([]string{"--runtime-endpoint", "unix://" + socket, "--timeout", "20s"}, args...)
	cmd := exec.CommandContext(ctx, framework.Crictl(t), args...)
	// A clean environment and a cwd anyone may enter: the test's own
	// (in the clone) may not be, and crictl must fail on the socket only.
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/"}
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: gid, Groups: groups}}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// secOwner is what Lstat says of path: mode, uid and gid.
func secOwner(t *testing.T, path string) (fs.FileMode, uint32, uint32) {
	t.Helper()
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	return fi.Mode(), st.Uid, st.Gid
}

// secOthersReach lists what under dir a host user who is neither root nor
// in a file's group could change: world-writable files and dirs whose
// every ancestor from / lets others search it. Symlinks do not count
// (their mode means nothing); subtrees others cannot enter are skipped.
func secOthersReach(dir string) []string {
	var found []string
	secOthersWalk(dir, func(p string, fi fs.FileInfo) {
		if fi.Mode().Perm()&0o002 != 0 {
			found = append(found, fmt.Sprintf("%s (%s)", p, fi.Mode()))
		}
	})
	return found
}

// secOthersRead lists the regular files under dir that a host user who is
// neither root nor in the file's group could read and that hold needle.
func secOthersRead(dir, needle string) []string {
	var found []string
	secOthersWalk(dir, func(p string, fi fs.FileInfo) {
		if fi.Mode().IsRegular() && fi.Mode().Perm()&0o004 != 0 {
			if b, err := os.ReadFile(p); err == nil && strings.Contains(string(b), needle) {
				found = append(found, p)
			}
		}
	})
	return found
}

// secOthersWalk calls visit for dir and everything under it that others
// can get to: every ancestor from / and every dir on the way lets them
// search it. Symlinks are left out.
func secOthersWalk(dir string, visit func(p string, fi fs.FileInfo)) {
	if !secOthersSearch(filepath.Dir(dir)) {
		return
	}
	filepath.WalkDir(dir, func(p string, de fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		fi, err := de.Info()
		if err != nil || fi.Mode()&fs.ModeSymlink != 0 {
			return nil
		}
		visit(p, fi)
		if de.IsDir() && fi.Mode().Perm()&0o001 == 0 {
			return filepath.SkipDir
		}
		return nil
	})
}

// secOthersSearch reports whether others may search every dir from / to
// dir.
func secOthersSearch(dir string) bool {
	for p := dir; ; p = filepath.Dir(p) {
		fi, err := os.Stat(p)
		if err != nil || fi.Mode().Perm()&0o001 == 0 {
			return false
		}
		if p == "/" {
			return true
		}
	}
}
