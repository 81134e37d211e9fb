package network

import (
	"context"
	"net"
	"os"
	"testing"

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
