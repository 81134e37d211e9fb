package main

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	cdi "tags.cncf.io/container-device-interface/specs-go"
)

const (
	kind = "nvidia.com/gpu"
	// libDir and binDir are where the container finds the driver.
	libDir = "/usr/local/nvidia/lib64"
	binDir = "/usr/local/nvidia/bin"
)

// inventory is what the machine has of the driver.
type inventory struct {
	devDir  string            // where the nodes are on the host
	gpus    []string          // nvidiaN, by N, under devDir
	control []string          // the nodes every GPU needs, under devDir
	libs    map[string]string // soname: the file on the host
	smi     string
}

var (
	gpuNode = regexp.MustCompile(`^nvidia([0-9]+)$`)
	// The driver's user-space libraries: NVML (nvidia-smi's), CUDA's and
	// the rest of libnvidia-*.
	driverLib = regexp.MustCompile(`^lib(nvidia-[a-z0-9-]+|cuda|nvcuvid|nvoptix)\.so\.[0-9]+$`)
)

// cacheArch is how `ldconfig -p` names a GOARCH's libraries.
var cacheArch = map[string]string{"amd64": "x86-64", "arm64": "AArch64"}

// scan finds the GPU and control nodes under devDir and the driver's
// libraries of goarch in cache, the output of `ldconfig -p`.
func scan(devDir, cache, goarch string) (inventory, error) {
	inv := inventory{devDir: devDir, libs: map[string]string{}}
	entries, err := os.ReadDir(devDir)
	if err != nil {
		return inv, err
	}
	for _, e := range entries {
		name := e.Name()
		switch {
		case gpuNode.MatchString(name):
			inv.gpus = append(inv.gpus, name)
		case name == "nvidiactl" || strings.HasPrefix(name, "nvidia-uvm") || name == "nvidia-modeset":
			inv.control = append(inv.control, name)
		}
	}
	caps, _ := filepath.Glob(filepath.Join(devDir, "nvidia-caps", "nvidia-cap*"))
	for _, c := range caps {
		inv.control = append(inv.control, filepath.Join("nvidia-caps", filepath.Base(c)))
	}
	slices.SortFunc(inv.gpus, func(a, b string) int { return gpuIndex(a) - gpuIndex(b) })
	if len(inv.gpus) == 0 {
		return inv, fmt.Errorf("no NVIDIA GPU node (nvidiaN) in %s", devDir)
	}
	if err := inv.findLibs(cache, goarch); err != nil {
		return inv, err
	}
	return inv, nil
}

// gpuIndex is N of nvidiaN (which gpuNode matched).
func gpuIndex(name string) int {
	n, _ := strconv.Atoi(strings.TrimPrefix(name, "nvidia"))
	return n
}

// node is the device node name under devDir, at the same name under the
// container's /dev.
func (inv inventory) node(name string) *cdi.DeviceNode {
	return &cdi.DeviceNode{Path: filepath.Join("/dev", name), HostPath: filepath.Join(inv.devDir, name)}
}

// findLibs reads lines such as
//
//	libnvidia-ml.so.1 (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1
//
// and keeps the driver's, of goarch, each at the file its link ends in.
func (inv *inventory) findLibs(cache, goarch string) error {
	arch, ok := cacheArch[goarch]
	if !ok {
		return fmt.Errorf("no ldconfig name for %s", goarch)
	}
	for _, line := range strings.Split(cache, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), " (")
		if !ok || !driverLib.MatchString(name) {
			continue
		}
		flags, path, ok := strings.Cut(rest, ") => ")
		if !ok || !slices.Contains(strings.Split(flags, ","), arch) {
			continue
		}
		if _, seen := inv.libs[name]; seen {
			continue // the cache lists the first one the linker finds first
		}
		real, err := filepath.EvalSymlinks(path)
		if err != nil {
			continue // a dangling link of an older driver
		}
		inv.libs[name] = real
	}
	if inv.libs["libnvidia-ml.so.1"] == "" {
		return errors.New("libnvidia-ml.so.1 (NVML, which nvidia-smi needs) is not in the dynamic linker's cache")
	}
	return nil
}

// spec is the CDI spec: a device per GPU and "all", the rest common.
func (inv inventory) spec() cdi.Spec {
	s := cdi.Spec{Version: "0.6.0", Kind: kind}
	all := cdi.Device{Name: "all"}
	for _, g := range inv.gpus {
		n := inv.node(g)
		s.Devices = append(s.Devices, cdi.Device{
			Name:           strings.TrimPrefix(g, "nvidia"),
			ContainerEdits: cdi.ContainerEdits{DeviceNodes: []*cdi.DeviceNode{n}},
		})
		all.ContainerEdits.DeviceNodes = append(all.ContainerEdits.DeviceNodes, n)
	}
	s.Devices = append(s.Devices, all)
	e := &s.ContainerEdits
	e.Env = []string{"LD_LIBRARY_PATH=" + libDir, "PATH=" + binDir + ":/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	for _, c := range inv.control {
		e.DeviceNodes = append(e.DeviceNodes, inv.node(c))
	}
	ro := []string{"ro", "nosuid", "nodev", "bind"}
	for _, name := range slices.Sorted(maps.Keys(inv.libs)) {
		e.Mounts = append(e.Mounts, &cdi.Mount{HostPath: inv.libs[name], ContainerPath: filepath.Join(libDir, name), Options: ro})
	}
	if inv.smi != "" {
		e.Mounts = append(e.Mounts, &cdi.Mount{HostPath: inv.smi, ContainerPath: filepath.Join(binDir, "nvidia-smi"), Options: ro})
	}
	return s
}
