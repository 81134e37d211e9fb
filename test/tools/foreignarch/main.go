// Command foreignarch runs a command in which another architecture's
// binaries run under QEMU's user-mode emulator, without touching the
// host's binfmt_misc:
//
//	foreignarch -arch arm64 -- chroot ROOT /debootstrap/debootstrap --second-stage
//
// Since Linux 6.7 each user namespace may mount its own binfmt_misc, and a
// handler registered there is seen only by that namespace's processes. The
// command runs in a new user namespace that maps every host id to itself
// (so files keep their real owners: debootstrap's second stage chowns to
// the packages' system users), with its own mount, PID and network
// namespaces (debootstrap mounts /proc and /sys in the chroot, which a user
// namespace may do only for namespaces it owns). The handler has the F and
// P flags: the emulator is opened here, so a chroot need not contain it, and
// argv[0] is kept.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"syscall"
)

// handlers are the binfmt_misc registrations of QEMU's static user-mode
// emulators, by GOARCH: ELF magic and mask of an executable of that machine.
var handlers = map[string]struct{ name, magic, mask, emulator string }{
	"arm64": {
		name:     "qemu-aarch64",
		magic:    `\x7fELF\x02\x01\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x02\x00\xb7\x00`,
		mask:     `\xff\xff\xff\xff\xff\xff\xff\x00\xff\xff\xff\xff\xff\xff\xff\xff\xfe\xff\xff\xff`,
		emulator: "/usr/bin/qemu-aarch64-static",
	},
}

// innerEnv marks the re-executed child, inside the new namespaces.
const innerEnv = "FOREIGNARCH_INNER"

func main() {
	arch := flag.String("arch", "arm64", "GOARCH of the binaries to run (arm64)")
	flag.Usage = func() {
		fmt.Fprintf(os.Stderr, "usage: foreignarch [-arch arm64] -- CMD [ARG...]\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() == 0 {
		flag.Usage()
		os.Exit(2)
	}
	h, ok := handlers[*arch]
	if !ok {
		fmt.Fprintf(os.Stderr, "foreignarch: no emulator known for %q\n", *arch)
		os.Exit(2)
	}
	var err error
	if os.Getenv(innerEnv) == "" {
		err = spawn(flag.Args(), *arch)
	} else {
		err = register(h.name, h.magic, h.mask, h.emulator)
		if err == nil {
			err = execute(flag.Args())
		}
	}
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		os.Exit(exit.ExitCode())
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "foreignarch: %v\n", err)
		os.Exit(1)
	}
}

// spawn runs this program again in the new namespaces, with the command.
func spawn(args []string, arch string) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	cmd := exec.Command(self, append([]string{"-arch", arch, "--"}, args...)...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(), innerEnv+"=1")
	all := []syscall.SysProcIDMap{{ContainerID: 0, HostID: 0, Size: 1<<32 - 1}}
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags: syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS | syscall.CLONE_NEWPID |
			syscall.CLONE_NEWNET,
		UidMappings:                all,
		GidMappings:                all,
		GidMappingsEnableSetgroups: true,
		Pdeathsig:                  syscall.SIGKILL,
	}
	return cmd.Run()
}

// register mounts this namespace's binfmt_misc, private to its mount
// namespace, and registers the emulator.
func register(name, magic, mask, emulator string) error {
	if err := syscall.Mount("", "/", "", syscall.MS_REC|syscall.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make mounts private: %w", err)
	}
	const dir = "/proc/sys/fs/binfmt_misc"
	if err := syscall.Mount("binfmt_misc", dir, "binfmt_misc", 0, ""); err != nil {
		return fmt.Errorf("mount binfmt_misc in a user namespace (Linux 6.7 or later): %w", err)
	}
	if _, err := os.Stat(emulator); err != nil {
		return fmt.Errorf("emulator (Debian's qemu-user-static): %w", err)
	}
	// F: the emulator is opened now, not looked up in a chroot. P: the
	// program gets its own argv[0], which multi-call binaries (iptables'
	// xtables-nft-multi, busybox) dispatch on.
	rule := fmt.Sprintf(":%s:M::%s:%s:%s:FP", name, magic, mask, emulator)
	if err := os.WriteFile(dir+"/register", []byte(rule), 0); err != nil {
		return fmt.Errorf("register %s: %w", name, err)
	}
	return nil
}

// execute runs the command as a child, not by exec: as the PID
// namespace's first process this one reaps what the command orphans.
func execute(args []string) error {
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	return cmd.Run()
}
