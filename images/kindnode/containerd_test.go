package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestItemsPerRuntime builds the item list of both images from the real
// files/ trees and fake binaries: each gets its own runtime's units and
// tools and none of the other's, and the twin's kubelet waits for
// containerd.
func TestItemsPerRuntime(t *testing.T) {
	bins := t.TempDir()
	exe := func(name string) string {
		p := filepath.Join(bins, name)
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, n := range []string{"kubelet", "kubeadm", "kubectl", "containerd", "containerd-shim-runc-v2", "ctr", "runc", "crictl", "bridge"} {
		exe(n)
	}
	cni := t.TempDir()
	if err := os.Link(filepath.Join(bins, "bridge"), filepath.Join(cni, "bridge")); err != nil {
		t.Fatal(err)
	}
	src, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		runtime      string
		want, absent []string
		kubeletAfter string
	}{
		{runtimeContainerd,
			[]string{"usr/local/bin/containerd", "usr/local/bin/ctr", "usr/local/sbin/runc", "etc/containerd/config.toml",
				"etc/containerd/cni.template", "etc/systemd/system/containerd.service",
				"etc/systemd/system/multi-user.target.wants/containerd.service"},
			[]string{"etc/systemd/system/berth.service", "kind/bin/berth-ready", "etc/berth/config.toml", "usr/local/bin/berth"},
			"After=containerd.service"},
	}
	for _, tt := range tests {
		t.Run(tt.runtime, func(t *testing.T) {
			b := &builder{srcDir: src, kubeVersion: "v1.37.2", kubeDir: bins, cniDir: cni, crictl: filepath.Join(bins, "crictl"),
				runtime: tt.runtime, containerdDir: bins, runc: filepath.Join(bins, "runc")}
			items, err := b.items(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			byDest := map[string]item{}
			for _, it := range items {
				if _, dup := byDest[it.dest]; dup {
					t.Errorf("%s listed twice", it.dest)
				}
				byDest[it.dest] = it
			}
			for _, d := range tt.want {
				if _, ok := byDest[d]; !ok {
					t.Errorf("no %s", d)
				}
			}
			for _, d := range tt.absent {
				if _, ok := byDest[d]; ok {
					t.Errorf("%s should not be in the %s image", d, tt.runtime)
				}
			}
			unit, ok := byDest["etc/systemd/system/kubelet.service"]
			if !ok {
				t.Fatal("no kubelet.service")
			}
			data, err := os.ReadFile(unit.src)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(data), tt.kubeletAfter) {
				t.Errorf("kubelet.service (%s) lacks %q", unit.src, tt.kubeletAfter)
			}
		})
	}
}
