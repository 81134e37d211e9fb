package network

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/containernetworking/plugins/pkg/ns"
)

func TestNetNSCreateRemove(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	ctx := context.Background()
	m, err := NewNetNS(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	path, err := m.Create(ctx, "pod1")
	if err != nil {
		t.Fatal(err)
	}
	if !IsPinned(path) {
		t.Fatalf("%s is not an nsfs pin", path)
	}
	if _, err := m.Create(ctx, "pod1"); err == nil {
		t.Fatal("second Create with the same id succeeded")
	}
	var loUp bool
	var ifaces int
	err = ns.WithNetNSPath(path, func(ns.NetNS) error {
		lo, err := net.InterfaceByName("lo")
		if err != nil {
			return err
		}
		loUp = lo.Flags&net.FlagUp != 0
		all, err := net.Interfaces()
		ifaces = len(all)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if !loUp || ifaces != 1 {
		t.Fatalf("new netns: lo up %v, %d interfaces; want lo up alone", loUp, ifaces)
	}
	ids, err := m.List()
	if err != nil || len(ids) != 1 || ids[0] != "pod1" {
		t.Fatalf("List = %v, %v", ids, err)
	}
	for i := range 2 {
		if err := m.Remove(ctx, path); err != nil {
			t.Fatalf("Remove #%d: %v", i+1, err)
		}
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("pin still there: %v", err)
	}
}

func TestNetNSCreateRejectsBadID(t *testing.T) {
	m, err := NewNetNS(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"", "a/b", ".hidden", "x\x00"} {
		if _, err := m.Create(context.Background(), id); err == nil {
			t.Errorf("Create(%q) succeeded", id)
		}
	}
}

// TestNetNSAdopt pins the namespace of a process that made its own, as a
// pause in a user namespace does, and brings its loopback up.
func TestNetNSAdopt(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	ctx := context.Background()
	m, err := NewNetNS(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sleep", "30")
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	path, err := m.Adopt(ctx, "pod1", cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	if !IsPinned(path) {
		t.Fatalf("%s is not an nsfs pin", path)
	}
	var pinned, theirs unix.Stat_t
	unix.Stat(path, &pinned)
	unix.Stat(fmt.Sprintf("/proc/%d/ns/net", cmd.Process.Pid), &theirs)
	if pinned.Ino != theirs.Ino {
		t.Fatal("the pin is not the process's namespace")
	}
	var loUp bool
	if err := ns.WithNetNSPath(path, func(ns.NetNS) error {
		lo, err := net.InterfaceByName("lo")
		loUp = err == nil && lo.Flags&net.FlagUp != 0
		return err
	}); err != nil || !loUp {
		t.Fatalf("lo up %v: %v", loUp, err)
	}
	if _, err := m.Adopt(ctx, "pod1", cmd.Process.Pid); err == nil {
		t.Fatal("second Adopt with the same id succeeded")
	}
	if _, err := m.Adopt(ctx, "pod2", 1<<30); err == nil {
		t.Fatal("Adopt of a missing process succeeded")
	}
	if _, err := os.Stat(m.Path("pod2")); !os.IsNotExist(err) {
		t.Fatalf("failed Adopt left its pin: %v", err)
	}
	if err := m.Remove(ctx, path); err != nil {
		t.Fatal(err)
	}
}
