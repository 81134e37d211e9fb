package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// A machine of two GPUs: what the spec gives a container, and what it
// leaves out (another architecture's libraries, the toolkit's own, the
// development links, a dangling one).
func TestScanAndSpec(t *testing.T) {
	dev := t.TempDir()
	for _, n := range []string{"nvidia1", "nvidia0", "nvidia10", "nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset", "null", "nvidia-caps/nvidia-cap1"} {
		p := filepath.Join(dev, n)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	lib := t.TempDir()
	file := func(name string) string {
		p := filepath.Join(lib, name)
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	link := func(name, to string) string {
		p := filepath.Join(lib, name)
		if err := os.Symlink(to, p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	ml := file("libnvidia-ml.so.580.1")
	cuda := file("libcuda.so.580.1")
	cache := strings.Join([]string{
		"4 libs found in cache `/etc/ld.so.cache'",
		"\tlibnvidia-ml.so.1 (libc6,x86-64) => " + link("libnvidia-ml.so.1", ml),
		"\tlibnvidia-ml.so.1 (libc6) => /usr/lib32/libnvidia-ml.so.1",
		"\tlibnvidia-ml.so (libc6,x86-64) => " + link("libnvidia-ml.so", ml),
		"\tlibcuda.so.1 (libc6,x86-64) => " + link("libcuda.so.1", cuda),
		"\tlibnvidia-ptxjitcompiler.so.1 (libc6,x86-64) => " + link("libnvidia-ptxjitcompiler.so.1", "gone"),
		"\tlibc.so.6 (libc6,x86-64, OS ABI: Linux 3.2.0) => /lib/x86_64-linux-gnu/libc.so.6",
		"\tlibnvidia-container.so.1 (libc6,AArch64) => /usr/lib/aarch64-linux-gnu/libnvidia-container.so.1",
	}, "\n")
	inv, err := scan(dev, cache, "amd64")
	if err != nil {
		t.Fatal(err)
	}
	inv.smi = "/usr/bin/nvidia-smi"
	s := inv.spec()
	if s.Kind != "nvidia.com/gpu" {
		t.Errorf("kind %q", s.Kind)
	}
	var names []string
	for _, d := range s.Devices {
		names = append(names, d.Name)
	}
	if !slices.Equal(names, []string{"0", "1", "10", "all"}) {
		t.Errorf("devices %v, want 0 1 10 all", names)
	}
	if n := s.Devices[3].ContainerEdits.DeviceNodes; len(n) != 3 || n[2].Path != "/dev/nvidia10" || n[2].HostPath != filepath.Join(dev, "nvidia10") {
		t.Errorf("all's nodes: %d, want the 3 GPUs", len(n))
	}
	var control []string
	for _, n := range s.ContainerEdits.DeviceNodes {
		if n.HostPath != filepath.Join(dev, strings.TrimPrefix(n.Path, "/dev/")) {
			t.Errorf("node %s from %s, want the host's node of that name", n.Path, n.HostPath)
		}
		control = append(control, strings.TrimPrefix(n.Path, "/dev/"))
	}
	if want := []string{"nvidia-modeset", "nvidia-uvm", "nvidia-uvm-tools", "nvidiactl", "nvidia-caps/nvidia-cap1"}; !slices.Equal(control, want) {
		t.Errorf("control nodes %v, want %v", control, want)
	}
	var mounts []string
	for _, m := range s.ContainerEdits.Mounts {
		mounts = append(mounts, m.ContainerPath+"="+m.HostPath)
	}
	want := []string{
		"/usr/local/nvidia/lib64/libcuda.so.1=" + cuda,
		"/usr/local/nvidia/lib64/libnvidia-ml.so.1=" + ml,
		"/usr/local/nvidia/bin/nvidia-smi=/usr/bin/nvidia-smi",
	}
	if !slices.Equal(mounts, want) {
		t.Errorf("mounts\n%v\nwant\n%v", mounts, want)
	}
	if !slices.Contains(s.ContainerEdits.Env, "LD_LIBRARY_PATH=/usr/local/nvidia/lib64") {
		t.Errorf("env %v", s.ContainerEdits.Env)
	}
}

func TestScanRefuses(t *testing.T) {
	empty := t.TempDir()
	gpu := t.TempDir()
	os.WriteFile(filepath.Join(gpu, "nvidia0"), nil, 0o644)
	for _, tc := range []struct {
		name, dev, cache, arch, want string
	}{
		{"no GPU node", empty, "", "amd64", "no NVIDIA GPU node"},
		{"no NVML", gpu, "\tlibcuda.so.1 (libc6,x86-64) => /nonexistent", "amd64", "libnvidia-ml.so.1"},
		{"unknown architecture", gpu, "", "mips", "no ldconfig name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := scan(tc.dev, tc.cache, tc.arch); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err %v, want one saying %q", err, tc.want)
			}
		})
	}
}
