package vmbed

import (
	"fmt"
	"regexp"
	"runtime"
	"sort"
	"strings"
)

// archSpec is what differs between the machines the test bed builds: the
// Debian architecture of the root and the kernel, how QEMU emulates it,
// and what the initramfs loads to see the root disk.
type archSpec struct {
	// suffix is added to the names of cached pieces: empty for amd64, so
	// that its images keep the names (and keys) they always had.
	suffix string
	// qemu is the system emulator; machine its -M, if any.
	qemu    string
	machine []string
	// tcgCPU is the CPU TCG emulates: QEMU's max, with every feature
	// it has.
	tcgCPU string
	// console is the serial console's device (the kernel's console=).
	console string
	// bootModules are what the kernel needs, in load order, to see the
	// root disk: Debian's cloud kernels build virtio_blk and its bus as
	// modules. Those built in are skipped.
	bootModules []string
}

var archs = map[string]archSpec{
	"amd64": {
		qemu:    "qemu-system-x86_64",
		tcgCPU:  "max",
		console: "ttyS0",
		bootModules: []string{
			"virtio_ring", "virtio", "virtio_pci_legacy_dev", "virtio_pci_modern_dev", "virtio_pci", "virtio_blk",
		},
	},
	// QEMU's virt machine; -drive if=virtio is a virtio-blk-pci there, as
	// are the rng and serial devices, so virtio_mmio (the machine's other
	// transport, which nothing here uses) is not loaded. The PCI host
	// bridge (pci-host-generic) is built into Debian's arm64 kernels.
	"arm64": {
		suffix:  "-arm64",
		qemu:    "qemu-system-aarch64",
		machine: []string{"-M", "virt"},
		// Pointer authentication with QEMU's own hash instead of the
		// architected QARMA5: the guest sees the same feature, and its
		// boot to the job takes half as long (66 s, not 138 s), since
		// Debian's arm64 binaries sign and check return addresses
		// everywhere.
		tcgCPU:  "max,pauth-impdef=on",
		console: "ttyAMA0",
		bootModules: []string{
			"virtio_ring", "virtio", "virtio_pci_legacy_dev", "virtio_pci_modern_dev", "virtio_pci", "virtio_blk",
		},
	},
}

// Archs are the architectures a machine can be built for, sorted.
func Archs() []string {
	var names []string
	for a := range archs {
		names = append(names, a)
	}
	sort.Strings(names)
	return names
}

// lookupArch returns the spec of a GOARCH name; empty means amd64.
func lookupArch(arch string) (string, archSpec, error) {
	if arch == "" {
		arch = "amd64"
	}
	a, ok := archs[arch]
	if !ok {
		return "", archSpec{}, fmt.Errorf("unknown architecture %q (want one of %s)", arch, strings.Join(Archs(), ", "))
	}
	return arch, a, nil
}

// hostArch is the architecture of this host's binaries (tests set it).
var hostArch = runtime.GOARCH

// foreign says whether arch's binaries need an emulator on this host.
func foreign(arch string) bool {
	return arch != hostArch
}

// kernelDep matches the versioned package Debian's cloud kernel
// metapackage of arch depends on.
func kernelDep(arch string) *regexp.Regexp {
	return regexp.MustCompile(`Depends: (linux-image-[0-9][0-9a-z.+~-]*-cloud-` + regexp.QuoteMeta(arch) + `)`)
}

// machineArgs are QEMU's machine, accelerator and CPU arguments for arch
// on a host of hostArch: KVM with the host's CPU where kvm says the host
// has it and the machine is of its own architecture, TCG with every
// feature QEMU emulates elsewhere.
func machineArgs(arch, hostArch string, kvm bool) []string {
	a := archs[arch]
	args := append([]string{}, a.machine...)
	if kvm && arch == hostArch {
		return append(args, "-accel", "kvm", "-cpu", "host")
	}
	return append(args, "-accel", "tcg,thread=multi", "-cpu", a.tcgCPU)
}
