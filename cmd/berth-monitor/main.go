// Command berth-monitor is berth's per-pod monitor (see package
// monitor/monitord). It is a binary of its own, not a berth subcommand,
// because one runs per pod and every container start and exec re-executes
// it as libcontainer's init: a small binary keeps both the per-pod memory
// and that cost down.
package main

import (
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"runtime"
	"syscall"

	"github.com/opencontainers/runc/libcontainer"
	// Registers device cgroup rule support with libcontainer.
	_ "github.com/opencontainers/cgroups/devices"
	// The C constructor that joins namespaces before the Go runtime starts.
	_ "github.com/opencontainers/runc/libcontainer/nsenter"

	"github.com/berth-runtime/berth/internal/cgroup"
	"github.com/berth-runtime/berth/monitor/monitord"
)

// libcontainer re-executes this binary as "init" inside each new container
// or exec; that must happen before main and before anything else starts.
func init() {
	if len(os.Args) > 1 && os.Args[1] == "init" {
		libcontainer.Init()
	}
	// The main goroutine keeps the main thread to itself for good, so no
	// other goroutine ever runs there. libcontainer starts each container
	// from a goroutine that locks its thread, joins the container's mount
	// namespace and exits locked, for the runtime to end the thread; but
	// Go cannot end the main thread, it parks it forever instead. Landing
	// there (now and then) left the monitor's main thread in a container's
	// mount namespace: the container's rootfs, and the disk space of its
	// writable layer, stayed held after its removal until the pod ended.
	runtime.LockOSThread()
}

// syncFD is where berth waits for "ok" (or an error) once the socket is
// served.
const syncFD = 3

func main() {
	fs := flag.NewFlagSet("berth-monitor", flag.ContinueOnError)
	pod := fs.String("pod", "", "pod sandbox id")
	sock := fs.String("socket", "", "unix socket to serve")
	root := fs.String("root", "", "libcontainer state root")
	driver := fs.String("cgroup-driver", string(cgroup.Cgroupfs), "cgroup driver: cgroupfs or systemd")
	if err := fs.Parse(os.Args[1:]); err != nil {
		os.Exit(2)
	}
	sync := os.NewFile(syncFD, "sync")
	report := func(msg string) {
		if sync != nil {
			sync.WriteString(msg)
			sync.Close()
			sync = nil
		}
	}
	if *pod == "" || *sock == "" || *root == "" {
		report("berth-monitor: --pod, --socket and --root are required")
		os.Exit(2)
	}
	cgroups, err := cgroup.ParseDriver(*driver)
	if err == nil {
		err = cgroups.DirectToSystemd()
	}
	if err != nil {
		report("berth-monitor: " + err.Error())
		os.Exit(2)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil)).With("pod", *pod)
	// Berth's terminal, berth's death and a reader hanging up on a pipe
	// must not end the monitor: it outlives all of them on purpose.
	signal.Ignore(syscall.SIGHUP, syscall.SIGINT, syscall.SIGPIPE)
	if err := os.MkdirAll(*root, 0o700); err != nil {
		report(err.Error())
		os.Exit(1)
	}
	os.Remove(*sock)
	l, err := net.Listen("unix", *sock)
	if err != nil {
		report(fmt.Sprintf("listen %s: %v", *sock, err))
		os.Exit(1)
	}
	srv := monitord.New(*pod, *root, cgroups, log)
	report("ok")
	log.Info("monitor serving", "socket", *sock, "pid", os.Getpid())
	if err := srv.Serve(l); err != nil {
		log.Error("monitor failed", "error", err)
		os.Exit(1)
	}
	os.Remove(*sock)
	log.Info("monitor done")
}
