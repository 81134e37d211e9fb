package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"

	"github.com/berth-runtime/berth/image"
	"github.com/berth-runtime/berth/internal/cgroup"
	"github.com/berth-runtime/berth/internal/config"
	"github.com/berth-runtime/berth/internal/events"
	"github.com/berth-runtime/berth/internal/faultpoint"
	"github.com/berth-runtime/berth/internal/tracing"
	"github.com/berth-runtime/berth/internal/version"
	"github.com/berth-runtime/berth/server"
	"github.com/berth-runtime/berth/stats"
	"github.com/berth-runtime/berth/streaming"
)

// flushGrace bounds the wait for the background flush of pulled layers
// at shutdown: the fsync of a large layer on a busy disk.
const flushGrace = 30 * time.Second

// gracePeriod bounds GracefulStop: long-lived streams (the kubelet's
// GetContainerEvents) would otherwise hold shutdown forever.
const gracePeriod = 2 * time.Second

// debugPanicEnv names an RPC that panics on every call; tests use it to
// check that the daemon survives a panicking handler.
const debugPanicEnv = "BERTH_DEBUG_PANIC_METHOD"

func daemonCommand(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("berth", flag.ContinueOnError)
	// Parse errors are printed here as one line; usage only on --help.
	fs.SetOutput(io.Discard)
	cfgFlags := config.RegisterFlags(fs)
	showVersion := fs.Bool("version", false, "print the version and exit")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			usage(stdout, fs)
			return 0
		}
		fmt.Fprintf(stderr, "berth: %v (see berth --help)\n", err)
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "berth: unexpected argument %q (see berth --help)\n", fs.Arg(0))
		return 2
	}
	if *showVersion {
		fmt.Fprint(stdout, version.String())
		return 0
	}
	cfg, err := cfgFlags.Load()
	if err != nil {
		fmt.Fprintf(stderr, "berth: %v\n", err)
		return 1
	}
	notifySocket := takeNotifySocket()

	// Descriptors inherited from whoever started berth (a shell's, a
	// supervisor's pipes) are nothing berth or its pods need, and every
	// process berth starts would inherit them: the pod processes, pause,
	// which shares its PID namespace with the pod's containers, and the
	// helpers (runc's CVE-2024-21626 was a descriptor reaching a
	// container). Marked close-on-exec, they stay with berth.
	cloexecInherited()
	log := newLogger(cfg, stderr)
	// The daemon must outlive whoever reads its stderr: without this, a log
	// write to a closed pipe kills it with SIGPIPE.
	signal.Ignore(syscall.SIGPIPE)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := serve(ctx, cfg, log, notifySocket); err != nil {
		log.Error("berth failed", "error", err)
		return 1
	}
	return 0
}

func usage(w io.Writer, fs *flag.FlagSet) {
	fmt.Fprintln(w, "usage: berth [flags]          run the CRI daemon")
	fmt.Fprintln(w, "       berth config default   print the default configuration file")
	fmt.Fprintln(w, "       berth images import|tag   load image archives, tag images (berth images --help)")
	fmt.Fprintln(w, "\nflags:")
	fs.SetOutput(w)
	fs.PrintDefaults()
	fs.SetOutput(io.Discard)
}

func newLogger(cfg *config.Config, w io.Writer) *slog.Logger {
	var level slog.Level
	// The config has been validated against exactly the names slog parses.
	_ = level.UnmarshalText([]byte(cfg.LogLevel))
	opts := &slog.HandlerOptions{Level: level}
	if cfg.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// serve runs the daemon until ctx is cancelled (SIGTERM/SIGINT) or serving
// fails. Containers are not touched on the way out: they keep running.
func serve(ctx context.Context, cfg *config.Config, log *slog.Logger, notifySocket string) error {
	// Once, before anything is touched: a node where the cgroup driver
	// cannot work (systemd without D-Bus) fails here, not at every pod.
	if err := cgroup.Driver(cfg.CgroupDriver).Check(ctx); err != nil {
		return err
	}
	for _, dir := range []string{cfg.Root, cfg.State} {
		if err := os.MkdirAll(dir, 0o711); err != nil {
			return fmt.Errorf("create %s: %w", dir, err)
		}
	}
	unlock, err := lockState(cfg.State)
	if err != nil {
		return err
	}
	defer unlock()
	// The socket is claimed before recovery touches anything, so a daemon
	// that is refused leaves the running one's pods and containers alone.
	// Clients that connect before Serve wait in the listen backlog.
	unlockSocket, err := lockSocket(cfg.Address)
	if err != nil {
		return err
	}
	defer unlockSocket()
	unlockRoot, err := lockRoot(cfg.Root)
	if err != nil {
		return err
	}
	defer unlockRoot()
	sock, err := listenSocket(cfg.Address, cfg.SocketGroup)
	if err != nil {
		return err
	}
	defer sock.remove(log)

	traces, err := tracing.New(ctx, tracing.Options{
		Enable: cfg.Tracing.Enable, Endpoint: cfg.Tracing.Endpoint, Insecure: cfg.Tracing.Insecure,
		SamplingRatePerMillion: cfg.Tracing.SamplingRatePerMillion,
		ServiceVersion:         version.Version, Logger: log,
	})
	if err != nil {
		return err
	}
	// Last out: the spans of the shutdown's calls are exported too.
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), gracePeriod)
		defer cancel()
		if err := traces.Shutdown(sctx); err != nil {
			log.Warn("export the last spans", "endpoint", cfg.Tracing.Endpoint, "error", err)
		}
	}()

	reg := prometheus.NewRegistry()
	metrics, err := server.NewMetrics(reg)
	if err != nil {
		return err
	}
	// Crash tests arm one step (faultpoint.FromEnv); nil otherwise.
	faults := faultpoint.FromEnv(log)
	imageMetrics, err := image.NewMetrics(reg)
	if err != nil {
		return err
	}
	images, err := newImages(ctx, cfg, log, faults, imageMetrics)
	if err != nil {
		return err
	}
	// The pods' own processes (the Go monitor or the C pod process): the
	// sandbox service starts, adopts and stops them, the container
	// service makes and watches its containers through them.
	procs := newPodProcesses(cfg, log)
	defer procs.Close()
	// The containers' records are loaded first (a pod undone during its
	// recovery may hold an infra container), then the pods are adopted,
	// then the containers reattached through the pods' processes.
	// Lifecycle events go from the services to GetContainerEvents.
	bus := events.NewBus()
	// NRI plugins hear of every pod and container; nil unless enabled.
	nriAPI, err := newNRI(cfg, log)
	if err != nil {
		return err
	}
	late := &latePods{cfg: cfg}
	containers, err := newContainers(ctx, cfg, late, procs, images, bus, nriAPI, log, faults, traces.Tracer())
	if err != nil {
		return err
	}
	defer containers.Close()
	cni, pods, err := newPods(ctx, cfg, log, containers, procs, bus, nriAPI, faults, traces.Tracer())
	if err != nil {
		return err
	}
	defer pods.Close()
	late.set(pods)
	if err := containers.Recover(ctx); err != nil {
		return err
	}
	// Before CRI is served: plugins start synchronised with the pods and
	// containers recovered above.
	if err := startNRI(nriAPI, pods, containers); err != nil {
		return err
	}
	defer nriAPI.Stop()
	streams, err := streaming.New(streaming.Options{
		Address: cfg.StreamAddress, Containers: containers, Pods: pods, Logger: log,
	})
	if err != nil {
		return err
	}
	defer streams.Close()
	collector, err := stats.New(stats.Options{
		Containers: containers, Pods: pods, LayerRoot: filepath.Join(cfg.Root, "containers"), Logger: log,
	})
	if err != nil {
		return err
	}
	srv, err := server.New(server.Options{
		Config:           cfg,
		Images:           images,
		Network:          cni,
		Sandboxes:        pods,
		Containers:       containers,
		Streams:          streams,
		Stats:            collector,
		Events:           bus,
		Logger:           log,
		Metrics:          metrics,
		UserNamespaces:   probeUserNamespaces(cfg, log),
		DebugPanicMethod: os.Getenv(debugPanicEnv),
		GRPCOptions:      traces.ServerOptions(),
	})
	if err != nil {
		return err
	}

	var metricsServer *http.Server
	if cfg.MetricsAddress != "" {
		if metricsServer, err = serveMetrics(cfg.MetricsAddress, reg, log); err != nil {
			return err
		}
	}

	adminSrv, err := listenAdmin(cfg.Address, images, log)
	if err != nil {
		return err
	}
	defer adminSrv.close(log)

	g := srv.GRPCServer()
	serveErr := make(chan error, 3)
	go func() {
		if err := g.Serve(sock.listener); err != nil {
			serveErr <- fmt.Errorf("serve CRI on %s: %w", cfg.Address, err)
		}
	}()
	go func() {
		if err := streams.Serve(); err != nil {
			serveErr <- err
		}
	}()
	go func() {
		if err := adminSrv.serve(); err != nil {
			serveErr <- err
		}
	}()
	log.Info("berth serving CRI", "address", cfg.Address, "version", version.Version,
		"root", cfg.Root, "state", cfg.State, "cgroup_driver", cfg.CgroupDriver, "metrics_address", cfg.MetricsAddress, "stream_address", streams.Addr())
	// For a Type=notify unit: the pods are adopted and CRI is served, so
	// whatever is ordered after berth (the kubelet) may start.
	if err := notifyReady(notifySocket); err != nil {
		log.Warn("tell systemd berth is ready", "error", err)
	}

	select {
	case err := <-serveErr:
		return err
	case <-ctx.Done():
	}
	log.Info("berth shutting down")
	stopGRPC(g, gracePeriod)
	// Layers published before their flush are made durable before berth
	// exits: after a clean stop and a reboot they would be pulled again.
	flushCtx, cancelFlush := context.WithTimeout(context.Background(), flushGrace)
	defer cancelFlush()
	if err := images.Flush(flushCtx); err != nil {
		log.Warn("flush the layers pulled last (they are pulled again after a reboot)", "error", err)
	}
	if metricsServer != nil {
		shutdownCtx, cancel := context.WithTimeout(context.Background(), gracePeriod)
		defer cancel()
		_ = metricsServer.Shutdown(shutdownCtx)
	}
	return nil
}

func stopGRPC(g *grpc.Server, grace time.Duration) {
	done := make(chan struct{})
	go func() {
		g.GracefulStop()
		close(done)
	}()
	timer := time.NewTimer(grace)
	defer timer.Stop()
	select {
	case <-done:
	case <-timer.C:
		g.Stop()
		<-done
	}
}

// cloexecInherited marks every descriptor above stderr close-on-exec.
func cloexecInherited() {
	if unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC) == nil {
		return
	}
	// Before Linux 5.11: one by one.
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return
	}
	for _, fd := range fds {
		if n, err := strconv.Atoi(fd.Name()); err == nil && n > 2 {
			unix.FcntlInt(uintptr(n), unix.F_SETFD, unix.FD_CLOEXEC)
		}
	}
}
