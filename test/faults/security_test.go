package faults_test

import (
	"io/fs"
	"path/filepath"
	"strings"
	"testing"

	"github.com/berth-runtime/berth/test/framework"
)

// TestSecuritySocket: the CRI socket is root's, mode 0660, so only root
// and the configured socket group may connect; berth's own dirs are not
// writable by anyone else.
func TestSecuritySocket(t *testing.T) {
	framework.RequireRoot(t)
	framework.Crictl(t)

	t.Run("default group root", func(t *testing.T) {
		// A socket dir berth makes itself, as /run/berth on a node.
		d := framework.StartDaemon(t, framework.WithSocket(filepath.Join(framework.TempDir(t), "run", "berth.sock")))
		secAssertSocket(t, d.Socket, 0)
		for _, dir := range []string{d.State, d.Root, filepath.Dir(d.Socket)} {
			mode, uid, _ := secOwner(t, dir)
			t.Logf("%s: %s uid %d", dir, mode, uid)
			if uid != 0 || mode.Perm()&0o022 != 0 {
				t.Errorf("%s is %s owned by uid %d: want root's and writable by root only", dir, mode, uid)
			}
		}
		if out, err := secCrictlAs(t, d.Socket, 0, 0, nil, "version"); err != nil {
			t.Fatalf("root's crictl version: %v\n%s", err, out)
		}
		secAssertRefused(t, d.Socket, "nobody", secNobody, secNobody, nil)
		secAssertRefused(t, d.Socket, "a stranger", secStranger, secStranger, nil)
		secAssertRefused(t, d.Socket, "a stranger in nogroup", secStranger, secStranger, []uint32{secNobody})
	})

	t.Run("socket group nogroup", func(t *testing.T) {
		d := framework.StartDaemon(t, framework.WithArgs("--socket-group", "nogroup"))
		secAssertSocket(t, d.Socket, secNobody)
		// The positive case needs the way to the socket open to others:
		// the framework's temp dir is 0711, as berth's own socket dir.
		if mode, _, _ := secOwner(t, filepath.Dir(d.Socket)); mode.Perm()&0o001 == 0 {
			t.Fatalf("%s is %s: others cannot reach the socket at all, the test proves nothing", filepath.Dir(d.Socket), mode)
		}
		out, err := secCrictlAs(t, d.Socket, secNobody, secNobody, nil, "version")
		if err != nil || !strings.Contains(out, "RuntimeName:  berth") {
			t.Errorf("nobody (group nogroup) crictl version: %v\n%s", err, out)
		}
		out, err = secCrictlAs(t, d.Socket, secStranger, secStranger, []uint32{secNobody}, "pods")
		if err != nil {
			t.Errorf("a stranger with nogroup as a supplementary group, crictl pods: %v\n%s", err, out)
		}
		secAssertRefused(t, d.Socket, "a stranger", secStranger, secStranger, nil)
	})
}

// secAssertSocket checks the socket file itself: a socket, root's, mode
// 0660, group gid.
func secAssertSocket(t *testing.T, path string, gid uint32) {
	t.Helper()
	mode, uid, g := secOwner(t, path)
	t.Logf("%s: %s uid %d gid %d", path, mode, uid, g)
	if mode.Type() != fs.ModeSocket {
		t.Errorf("%s is not a socket: %s", path, mode)
	}
	if mode.Perm() != 0o660 || uid != 0 || g != gid {
		t.Errorf("%s: %s uid %d gid %d, want 0660 uid 0 gid %d", path, mode.Perm(), uid, g, gid)
	}
}

// secAssertRefused: a client as uid:gid (groups) cannot connect at all.
func secAssertRefused(t *testing.T, socket, who string, uid, gid uint32, groups []uint32) {
	t.Helper()
	out, err := secCrictlAs(t, socket, uid, gid, groups, "version")
	if err == nil {
		t.Errorf("%s (uid %d gid %d groups %v) reached berth: %s", who, uid, gid, groups, out)
		return
	}
	if !strings.Contains(out, "permission denied") {
		t.Errorf("%s (uid %d): crictl failed, but not on the socket's permission: %v\n%s", who, uid, err, out)
	}
}
