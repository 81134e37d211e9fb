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

	"github.com/berth-runtime/berth/container"
	"github.com/berth-runtime/berth/image"
	"github.com/berth-runtime/berth/internal/cgroup"
	"github.com/berth-runtime/berth/internal/config"
	"github.com/berth-runtime/berth/internal/events"
	"github.com/berth-runtime/berth/internal/faultpoint"
	"github.com/berth-runtime/berth/internal/steps"
	"github.com/berth-runtime/berth/internal/tracing"
	"github.com/berth-runtime/berth/internal/version"
	podprocs "github.com/berth-runtime/berth/monitor/pods"
	"github.com/berth-runtime/berth/network"
	"github.com/berth-runtime/berth/nri"
	"github.com/berth-runtime/berth/sandbox"
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
	d := &daemon{cfg: cfg, log: log}
	defer d.close()
	err := (&steps.Runner{}).Run(ctx,
		steps.Step{Name: "claim state and socket", Do: d.claim},
		steps.Step{Name: "tracing", Do: d.startTracing},
		steps.Step{Name: "images", Do: d.startImages},
		steps.Step{Name: "recover pods and containers", Do: d.recover},
		steps.Step{Name: "NRI", Do: d.startNRI},
		steps.Step{Name: "CRI server", Do: d.newServer},
		steps.Step{Name: "metrics and admin", Do: d.listenMore},
	)
	if err != nil {
		return err
	}
	return d.serve(ctx, notifySocket)
}

// daemon is berth from start to stop: what serve's steps made.
type daemon struct {
	cfg *config.Config
	log *slog.Logger
	// closers undo the steps done, last first, when serve returns.
	closers []func()

	sock          *socket
	traces        *tracing.Provider
	reg           *prometheus.Registry
	faults        *faultpoint.Point
	images        *image.Service
	procs         *podprocs.Set
	bus           *events.Bus
	nri           *nri.NRI
	containers    *container.Service
	cni           *network.CNI
	pods          *sandbox.Manager
	streams       *streaming.Server
	srv           *server.Server
	metricsServer *http.Server
	admin         *adminServer
}

func (d *daemon) onClose(f func()) { d.closers = append(d.closers, f) }

func (d *daemon) close() {
	for i := len(d.closers) - 1; i >= 0; i-- {
		d.closers[i]()
	}
}

// claim takes the state, the socket and the root. The socket is claimed
// before recovery touches anything, so a daemon that is refused leaves the
// running one's pods and containers alone. Clients that connect before
// Serve wait in the listen backlog.
func (d *daemon) claim(ctx context.Context) error {
	cfg := d.cfg
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
	for _, lock := range []func() (func(), error){
		func() (func(), error) { return lockState(cfg.State) },
		func() (func(), error) { return lockSocket(cfg.Address) },
		func() (func(), error) { return lockRoot(cfg.Root) },
	} {
		unlock, err := lock()
		if err != nil {
			return err
		}
		d.onClose(unlock)
	}
	sock, err := listenSocket(cfg.Address, cfg.SocketGroup)
	if err != nil {
		return err
	}
	d.sock = sock
	d.onClose(func() { sock.remove(d.log) })
	return nil
}

func (d *daemon) startTracing(ctx context.Context) error {
	cfg := d.cfg
	traces, err := tracing.New(ctx, tracing.Options{
		Enable: cfg.Tracing.Enable, Endpoint: cfg.Tracing.Endpoint, Insecure: cfg.Tracing.Insecure,
		SamplingRatePerMillion: cfg.Tracing.SamplingRatePerMillion,
		ServiceVersion:         version.Version, Logger: d.log,
	})
	if err != nil {
		return err
	}
	d.traces = traces
	// Last out: the spans of the shutdown's calls are exported too.
	d.onClose(func() {
		sctx, cancel := context.WithTimeout(context.Background(), gracePeriod)
		defer cancel()
		if err := traces.Shutdown(sctx); err != nil {
			d.log.Warn("export the last spans", "endpoint", cfg.Tracing.Endpoint, "error", err)
		}
	})
	return nil
}

func (d *daemon) startImages(ctx context.Context) (err error) {
	d.reg = prometheus.NewRegistry()
	// Crash tests arm one step (faultpoint.FromEnv); nil otherwise.
	d.faults = faultpoint.FromEnv(d.log)
	imageMetrics, err := image.NewMetrics(d.reg)
	if err != nil {
		return err
	}
	d.images, err = newImages(ctx, d.cfg, d.log, d.faults, imageMetrics)
	return err
}

// recover loads the containers' records first (a pod undone during its
// recovery may hold an infra container), then adopts the pods, then
// reattaches the containers through the pods' processes.
func (d *daemon) recover(ctx context.Context) (err error) {
	// The pods' own processes (the Go monitor or the C pod process): the
	// sandbox service starts, adopts and stops them, the container
	// service makes and watches its containers through them.
	d.procs = newPodProcesses(d.cfg, d.log)
	d.onClose(d.procs.Close)
	// Lifecycle events go from the services to GetContainerEvents.
	d.bus = events.NewBus()
	// NRI plugins hear of every pod and container; nil unless enabled.
	if d.nri, err = newNRI(d.cfg, d.log); err != nil {
		return err
	}
	late := &latePods{cfg: d.cfg}
	d.containers, err = newContainers(ctx, d.cfg, late, d.procs, d.images, d.bus, d.nri, d.log, d.faults, d.traces.Tracer())
	if err != nil {
		return err
	}
	d.onClose(d.containers.Close)
	d.cni, d.pods, err = newPods(ctx, d.cfg, d.log, d.containers, d.procs, d.bus, d.nri, d.faults, d.traces.Tracer())
	if err != nil {
		return err
	}
	d.onClose(d.pods.Close)
	late.set(d.pods)
	return d.containers.Recover(ctx)
}

// startNRI starts the plugins before CRI is served, synchronised with the
// pods and containers recovered.
func (d *daemon) startNRI(context.Context) error {
	if err := startNRI(d.nri, d.pods, d.containers); err != nil {
		return err
	}
	d.onClose(func() { d.nri.Stop() })
	return nil
}

func (d *daemon) newServer(context.Context) (err error) {
	cfg, log := d.cfg, d.log
	d.streams, err = streaming.New(streaming.Options{
		Address: cfg.StreamAddress, Containers: d.containers, Pods: d.pods, Logger: log,
	})
	if err != nil {
		return err
	}
	d.onClose(func() { d.streams.Close() })
	collector, err := stats.New(stats.Options{
		Containers: d.containers, Pods: d.pods, LayerRoot: filepath.Join(cfg.Root, "containers"), Logger: log,
	})
	if err != nil {
		return err
	}
	metrics, err := server.NewMetrics(d.reg)
	if err != nil {
		return err
	}
	d.srv, err = server.New(server.Options{
		Config: cfg, Images: d.images, Network: d.cni, Sandboxes: d.pods, Containers: d.containers,
		Streams: d.streams, Stats: collector, Events: d.bus, Logger: log, Metrics: metrics,
		UserNamespaces:   probeUserNamespaces(cfg, log),
		DebugPanicMethod: os.Getenv(debugPanicEnv),
		GRPCOptions:      d.traces.ServerOptions(),
	})
	return err
}

func (d *daemon) listenMore(context.Context) (err error) {
	if d.cfg.MetricsAddress != "" {
		if d.metricsServer, err = serveMetrics(d.cfg.MetricsAddress, d.reg, d.log); err != nil {
			return err
		}
	}
	if d.admin, err = listenAdmin(d.cfg.Address, d.images, d.log); err != nil {
		return err
	}
	d.onClose(func() { d.admin.close(d.log) })
	return nil
}

// serve serves CRI, streaming and the admin API until ctx ends or one of
// them fails, then stops.
func (d *daemon) serve(ctx context.Context, notifySocket string) error {
	cfg, log, g := d.cfg, d.log, d.srv.GRPCServer()
	serveErr := make(chan error, 3)
	go func() {
		if err := g.Serve(d.sock.listener); err != nil {
			serveErr <- fmt.Errorf("serve CRI on %s: %w", cfg.Address, err)
		}
	}()
	go func() {
		if err := d.streams.Serve(); err != nil {
			serveErr <- err
		}
	}()
	go func() {
		if err := d.admin.serve(); err != nil {
			serveErr <- err
		}
	}()
	log.Info("berth serving CRI", "address", cfg.Address, "version", version.Version,
		"root", cfg.Root, "state", cfg.State, "cgroup_driver", cfg.CgroupDriver, "metrics_address", cfg.MetricsAddress, "stream_address", d.streams.Addr())
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
	d.stop(g)
	return nil
}

func (d *daemon) stop(g *grpc.Server) {
	stopGRPC(g, gracePeriod)
	// Layers published before their flush are made durable before berth
	// exits: after a clean stop and a reboot they would be pulled again.
	flushCtx, cancelFlush := context.WithTimeout(context.Background(), flushGrace)
	defer cancelFlush()
	if err := d.images.Flush(flushCtx); err != nil {
		d.log.Warn("flush the layers pulled last (they are pulled again after a reboot)", "error", err)
	}
	if d.metricsServer != nil {
		shutdownCtx, cancel := context.WithTimeout(context.Background(), gracePeriod)
		defer cancel()
		_ = d.metricsServer.Shutdown(shutdownCtx)
	}
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
