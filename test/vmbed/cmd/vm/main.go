// Command vm is the test bed's entry point (hack/vm wraps it):
//
//	vm image [--arch amd64|arm64] [--kernel 6.1|6.12] [--package P]...  build (or find) the image, print its directory
//	vm run [options] -- CMD [ARG...]             boot a pristine copy, run CMD as root, power off
//
// run exits with CMD's exit code, or 125 when the machine did not run it to
// its end.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/berth-runtime/berth/test/vmbed"
)

type multi []string

func (m *multi) String() string     { return strings.Join(*m, ",") }
func (m *multi) Set(s string) error { *m = append(*m, s); return nil }

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	fs := flag.NewFlagSet(os.Args[1], flag.ExitOnError)
	cache := fs.String("cache", envOr("BERTH_VM_CACHE", "/var/cache/berth-dev/vm"), "where images and their pieces are kept")
	mirror := fs.String("mirror", "http://deb.debian.org/debian", "Debian mirror")
	kernel := fs.String("kernel", "6.1", "Debian cloud kernel: 6.1 (bookworm) or 6.12 (trixie)")
	arch := fs.String("arch", "amd64", "machine architecture: amd64, or arm64 (QEMU's virt machine, emulated)")
	foreignArch := fs.String("foreignarch", besideSelf("foreignarch"), "test/tools/foreignarch, for a foreign architecture's chroot steps")
	heavyLock := fs.String("heavy-lock", "/tmp/berth-heavy.lock", "lock file held while debootstrap runs (one heavy build at a time); empty: none")
	init := fs.String("init", "systemd", "PID 1: systemd, or plain (no systemd)")
	cpus := fs.Int("cpus", 2, "vCPUs")
	mem := fs.Int("mem", 4096, "memory in MiB")
	appendArgs := fs.String("append", "", "extra kernel command line")
	out := fs.String("out", "", "host directory that receives the job's /job/out")
	timeout := fs.Duration("timeout", 30*time.Minute, "power the machine off after this long")
	console := fs.Bool("console", false, "copy the machine's console (kernel, systemd) to stderr")
	rootGiB := fs.Int("root-size", 0, "root disk size in GiB, when more than the image's 8 (the job runs resize2fs /dev/vda)")
	noSwap := fs.Bool("no-swap", false, "boot without the 512 MiB swap file")
	reboot := fs.Bool("reboot", false, "let the job reboot the machine: exit code 75 asks for it, the job runs again after it")
	var in, extra, disks multi
	fs.Var(&disks, "disk", "a raw disk image attached read-write after the job disk, /dev/vdc onwards (repeatable)")
	fs.Var(&extra, "package", "a Debian package beyond the test bed's own (repeatable): an image variant of its own")
	fs.Var(&in, "in", "host file or directory copied into /job/in (repeatable)")
	fs.Parse(os.Args[2:])

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	img, err := vmbed.BuildImage(ctx, vmbed.ImageConfig{
		Cache: *cache, Mirror: *mirror, Suite: "bookworm", Kernel: *kernel, Extra: extra, Log: log,
		Arch: *arch, ForeignArch: *foreignArch, HeavyLock: *heavyLock,
	})
	if err != nil {
		fail(err)
	}
	switch os.Args[1] {
	case "image":
		fmt.Println(img.Dir)
	case "run":
		if fs.NArg() == 0 {
			usage()
		}
		ctx, cancel := context.WithTimeout(ctx, *timeout)
		defer cancel()
		cfg := vmbed.RunConfig{
			Image: img, Init: *init, CPUs: *cpus, MemMiB: *mem, Append: *appendArgs,
			In: in, Out: *out, Cmd: fs.Args(), NoSwap: *noSwap, Reboot: *reboot, RootGiB: *rootGiB, Disks: disks, Stdout: os.Stdout, Log: log,
			TmpDir: os.Getenv("TMPDIR"),
		}
		if *console {
			cfg.Console = os.Stderr
		}
		rc, err := vmbed.Run(ctx, cfg)
		if err != nil {
			fail(err)
		}
		os.Exit(rc)
	default:
		usage()
	}
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// besideSelf is the path of a tool built beside this program (hack/vm
// builds both into $BERTH_OUTPUT/bin), or the bare name for PATH.
func besideSelf(name string) string {
	self, err := os.Executable()
	if err != nil {
		return name
	}
	p := filepath.Join(filepath.Dir(self), name)
	if _, err := os.Stat(p); err != nil {
		return name
	}
	return p
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "vm:", err)
	os.Exit(125)
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: vm image [--arch amd64|arm64] [--kernel 6.1|6.12] | vm run [--arch A] [--kernel K] [--init systemd|plain] [--in PATH]... [--out DIR] -- CMD [ARG...]")
	os.Exit(2)
}
