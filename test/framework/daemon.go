package framework

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

const (
	startTimeout = 30 * time.Second
	stopTimeout  = 15 * time.Second
)

// Daemon is a berth daemon started by StartDaemon, with CRI clients
// connected to its socket.
type Daemon struct {
	Runtime runtimeapi.RuntimeServiceClient
	Image   runtimeapi.ImageServiceClient
	Conn    *grpc.ClientConn

	Dir        string // private temp dir holding everything below
	Root       string
	State      string
	Socket     string
	CNIConfDir string
	ConfigPath string
	LogPath    string // the daemon's stdout and stderr, across restarts
	Args       []string
	PID        int

	t      testing.TB
	env    []string
	binary string // "" is the binary under test (WithBinary, SetBinary)
	proc   *process
}

type process struct {
	cmd  *exec.Cmd
	done chan struct{} // closed once the process has been waited for
	err  error         // from Wait, valid after done
}

// Option changes how StartDaemon starts the daemon.
type Option func(*options)

type options struct {
	config string
	args   []string
	env    []string
	socket string
	binary string
}

// WithConfig writes toml as the daemon's config file. Paths set by the
// framework through flags (address, root, state, cni.conf_dir) override it.
func WithConfig(toml string) Option { return func(o *options) { o.config = toml } }

// WithArgs appends command-line arguments; a later flag overrides an
// earlier one, list flags accumulate.
func WithArgs(args ...string) Option { return func(o *options) { o.args = append(o.args, args...) } }

// WithEnv adds KEY=VALUE entries to the daemon's environment.
func WithEnv(env ...string) Option { return func(o *options) { o.env = append(o.env, env...) } }

// WithSocket serves on path instead of a socket in the daemon's temp dir.
func WithSocket(path string) Option { return func(o *options) { o.socket = path } }

// StartDaemon starts berth in a fresh temp dir and waits until its socket
// answers Version. The daemon is stopped and the dir removed when the test
// ends; its log is dumped if the test failed.
func StartDaemon(t testing.TB, opts ...Option) *Daemon {
	t.Helper()
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	dir := TempDir(t)
	d := &Daemon{
		Dir:        dir,
		Root:       filepath.Join(dir, "root"),
		State:      filepath.Join(dir, "state"),
		Socket:     cmpOr(o.socket, filepath.Join(dir, "berth.sock")),
		CNIConfDir: filepath.Join(dir, "net.d"),
		ConfigPath: filepath.Join(dir, "config.toml"),
		LogPath:    filepath.Join(dir, "berth.log"),
		t:          t,
		env:        o.env,
		binary:     o.binary,
	}
	if err := os.Mkdir(d.CNIConfDir, 0o755); err != nil {
		t.Fatal(err)
	}
	// Always an explicit config file, so a host's /etc/berth/config.toml
	// cannot leak into the test.
	if err := os.WriteFile(d.ConfigPath, []byte(o.config), 0o644); err != nil {
		t.Fatal(err)
	}
	d.Args = []string{
		"--config", d.ConfigPath,
		"--address", d.Socket,
		"--root", d.Root,
		"--state", d.State,
		"--cni-conf-dir", d.CNIConfDir,
		"--log-level", "debug",
	}
	if bin := os.Getenv(EnvCNIBinDir); bin != "" {
		d.Args = append(d.Args, "--cni-bin-dir", bin)
	}
	// The whole suite, or one test, against the C pod process.
	if kind := os.Getenv(EnvPodProcess); kind != "" {
		d.Args = append(d.Args, "--pod-process", kind)
	}
	d.Args = append(d.Args, o.args...)

	t.Cleanup(d.cleanup)
	if err := d.start(); err != nil {
		d.dumpLog()
		t.Fatalf("start berth: %v", err)
	}
	return d
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func (d *Daemon) start() error {
	if err := d.spawn(); err != nil {
		return err
	}
	if err := d.waitReady(); err != nil {
		d.dumpStacks()
		return err
	}
	conn, err := grpc.NewClient("unix://"+d.Socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	d.Conn = conn
	d.Runtime = runtimeapi.NewRuntimeServiceClient(conn)
	d.Image = runtimeapi.NewImageServiceClient(conn)
	return nil
}

// spawn starts the daemon process, without waiting for it to serve.
func (d *Daemon) spawn() error {
	log, err := os.OpenFile(d.LogPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer log.Close() // the child has its own copy
	bin := d.binary
	if bin == "" {
		bin = Binary(d.t)
	}
	cmd := exec.Command(bin, d.Args...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.Env = append(os.Environ(), d.env...)
	if err := cmd.Start(); err != nil {
		return err
	}
	p := &process{cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	d.proc, d.PID = p, cmd.Process.Pid
	return nil
}

// waitReady polls the socket with a fresh connection each time: a
// long-lived gRPC client would back off between attempts.
func (d *Daemon) waitReady() error {
	deadline := time.Now().Add(startTimeout)
	var lastErr error
	for time.Now().Before(deadline) {
		select {
		case <-d.proc.done:
			return fmt.Errorf("berth exited during start-up: %v", d.proc.err)
		default:
		}
		if lastErr = d.ping(); lastErr == nil {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("socket %s not answering Version after %s: %v", d.Socket, startTimeout, lastErr)
}

func (d *Daemon) ping() error {
	c, err := net.DialTimeout("unix", d.Socket, time.Second)
	if err != nil {
		return err
	}
	c.Close()
	conn, err := grpc.NewClient("unix://"+d.Socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err = runtimeapi.NewRuntimeServiceClient(conn).Version(ctx, &runtimeapi.VersionRequest{})
	return err
}

// Running reports whether the daemon process has not exited.
func (d *Daemon) Running() bool {
	if d.proc == nil {
		return false
	}
	select {
	case <-d.proc.done:
		return false
	default:
		return true
	}
}

// Stop sends SIGTERM and waits for the daemon to exit; it returns the
// exit error, nil for a clean exit 0. A daemon still running after 15s is
// killed and reported.
func (d *Daemon) Stop() error {
	d.t.Helper()
	return d.signalAndWait(syscall.SIGTERM, stopTimeout)
}

// Kill sends SIGKILL and waits for the daemon to exit, as a crash would.
func (d *Daemon) Kill() {
	d.t.Helper()
	_ = d.signalAndWait(syscall.SIGKILL, stopTimeout)
}

// Restart stops the daemon if it still runs, starts it again with the same
// arguments and dirs, and reconnects the clients.
func (d *Daemon) Restart() {
	d.t.Helper()
	if d.Running() {
		if err := d.Stop(); err != nil {
			d.t.Fatalf("stop berth for restart: %v", err)
		}
	}
	if err := d.start(); err != nil {
		d.dumpLog()
		d.t.Fatalf("restart berth: %v", err)
	}
}

// ExitCode is the exit code of the last daemon process, -1 while it runs
// or if it died of a signal.
func (d *Daemon) ExitCode() int {
	if d.Running() || d.proc == nil {
		return -1
	}
	return d.proc.cmd.ProcessState.ExitCode()
}

func (d *Daemon) signalAndWait(sig syscall.Signal, timeout time.Duration) error {
	d.closeConn()
	if !d.Running() {
		return d.proc.exitErr()
	}
	if err := syscall.Kill(d.PID, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("signal %d: %w", d.PID, err)
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case <-d.proc.done:
		return d.proc.exitErr()
	case <-timer.C:
	}
	_ = syscall.Kill(d.PID, syscall.SIGKILL)
	<-d.proc.done
	return fmt.Errorf("berth (pid %d) still running %s after %s; killed", d.PID, timeout, sig)
}

func (p *process) exitErr() error {
	if p == nil {
		return nil
	}
	return p.err
}

func (d *Daemon) closeConn() {
	if d.Conn != nil {
		d.Conn.Close()
		d.Conn = nil
	}
}

// cleanup removes every pod the test left through the daemon itself (a
// daemon the test killed is restarted for that), stops the daemon, and
// then kills and reports any process of this daemon that still runs: the
// daemon leaves containers running on purpose when it stops, so without
// this a test's pods would outlive it.
func (d *Daemon) cleanup() {
	if !d.Running() && d.proc != nil {
		if err := d.start(); err != nil {
			d.t.Logf("restart berth to clean up: %v", err)
		}
	}
	if d.Running() {
		d.RemoveAllPods()
		if err := d.signalAndWait(syscall.SIGTERM, stopTimeout); err != nil {
			d.t.Errorf("stop berth at cleanup: %v", err)
		}
	}
	d.closeConn()
	if leaked := killProcessesUnder(d.Dir); len(leaked) > 0 {
		d.t.Errorf("processes of this daemon still ran after cleanup (killed): %v", leaked)
	}
	if d.t.Failed() {
		d.dumpLog()
	}
}

// RemoveAllPods stops and removes every pod, with a context of its own:
// the test's context is already cancelled when cleanups run.
func (d *Daemon) RemoveAllPods() {
	if d.Runtime == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pods, err := d.Runtime.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		d.t.Errorf("list pods at cleanup: %v", err)
		return
	}
	for _, p := range pods.Items {
		if _, err := d.Runtime.StopPodSandbox(ctx, &runtimeapi.StopPodSandboxRequest{PodSandboxId: p.Id}); err != nil {
			d.t.Errorf("stop pod %s at cleanup: %v", p.Id, err)
		}
		if _, err := d.Runtime.RemovePodSandbox(ctx, &runtimeapi.RemovePodSandboxRequest{PodSandboxId: p.Id}); err != nil {
			d.t.Errorf("remove pod %s at cleanup: %v", p.Id, err)
		}
	}
}

func (d *Daemon) dumpLog() {
	b, err := os.ReadFile(d.LogPath)
	if err != nil {
		d.t.Logf("berth log %s: %v", d.LogPath, err)
		return
	}
	d.t.Logf("berth log (%s):\n%s", d.LogPath, b)
}

// Ctx returns a context for one CRI call, cancelled when the test ends or
// after 30s.
func Ctx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}
