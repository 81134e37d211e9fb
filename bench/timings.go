package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/container/spec"
	"github.com/berth-runtime/berth/internal/cgprime"
	"github.com/berth-runtime/berth/internal/cgroup"
	"github.com/berth-runtime/berth/internal/config"
	"github.com/berth-runtime/berth/monitor"
	"github.com/berth-runtime/berth/network"
	"github.com/berth-runtime/berth/sandbox"
)

const timingsUsage = `usage: bench timings [berth daemon flags] [-berth PATH] [-n N] [-image REF] [-json FILE] [-label L]

Times berth's primitive steps of a pod start and teardown one by one, N
times, with berth's own code: netns create+pin, CNI ADD, the pod's monitor
and pause in it, rootfs mount, spec, container create and start
(libcontainer in the monitor), then the teardown steps. It uses the CNI and
registry settings of the daemon's config (file and flags) on a temporary
root and state of its own, which it removes, so it can run beside a daemon.
The monitor and pause are the ones installed next to -berth. This is the
floor a pod start through the CRI is compared with (bench compare).`

func timingsCommand(args []string) error {
	fs := flag.NewFlagSet("bench timings", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	cfgFlags := config.RegisterFlags(fs)
	berth := fs.String("berth", defaultBerth(), "the berth binary whose berth-monitor and berth-pause (installed next to it) are timed")
	n := fs.Int("n", 20, "iterations")
	ref := fs.String("image", "docker.io/library/busybox:latest", "container image (needs sleep), pulled into the temporary root")
	jsonOut := fs.String("json", "", "also write the medians as JSON here")
	label := fs.String("label", "", "label recorded in the JSON (bench table matches it to a benchmark run)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Println(timingsUsage)
			return nil
		}
		return fmt.Errorf("timings: %w\n%s", err, timingsUsage)
	}
	cfg, err := cfgFlags.Load()
	if err != nil {
		return fmt.Errorf("timings: %w", err)
	}
	bins, err := findBerthBinaries(*berth)
	if err != nil {
		return fmt.Errorf("timings: %w", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	res, err := measureSteps(ctx, cfg, bins, *ref, max(*n, 1), slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	if err != nil {
		return fmt.Errorf("timings: %w", err)
	}
	res.Label = *label
	for _, s := range res.Steps {
		fmt.Printf("%-9s %-34s p50 %8.2f ms  p90 %8.2f ms\n", s.Phase, s.Name, s.P50, s.P90)
	}
	if *jsonOut != "" {
		data, _ := json.MarshalIndent(res, "", "  ")
		if err := os.WriteFile(*jsonOut, append(data, '\n'), 0o644); err != nil {
			return fmt.Errorf("timings: %w", err)
		}
	}
	return nil
}

// stepTimings is the JSON the benchmark's table reads (its Steps type).
type stepTimings struct {
	Label      string       `json:"label"`
	Iterations int          `json:"iterations"`
	Steps      []stepTiming `json:"steps"`
}

type stepTiming struct {
	Name    string    `json:"name"`
	Phase   string    `json:"phase"`
	InSum   bool      `json:"in_sum"`
	P50     float64   `json:"p50_ms"`
	P90     float64   `json:"p90_ms"`
	Samples []float64 `json:"samples_ms"`
}

// The steps, in the order they run. inSum marks the primitives a pod
// start cannot do without: their medians add up to the floor.
var timedSteps = []struct {
	name, phase string
	inSum       bool
}{
	{"netns create+pin", "start", true},
	{"CNI ADD", "start", true},
	{"monitor spawn", "start", false},
	{"pause start (in the monitor)", "start", false},
	{"rootfs mount (overlay)", "start", true},
	{"spec build+write", "start", false},
	{"container create (libcontainer)", "start", true},
	{"container start", "start", true},
	{"container kill+wait", "teardown", false},
	{"container delete", "teardown", false},
	{"rootfs unmount", "teardown", false},
	{"pause stop", "teardown", false},
	{"monitor shutdown", "teardown", false},
	{"CNI DEL", "teardown", false},
	{"netns unpin", "teardown", false},
	{"cgroup remove", "teardown", false},
}

type stepEnv struct {
	cfg     *config.Config
	cni     *network.CNI
	netns   *network.NetNS
	monitor string
	pause   []string // the pause command, without its arguments
	tmp     string
	state   string
	img     imageInfo
	durs    map[string][]float64
}

type imageInfo struct {
	name   string
	lower  []string
	config spec.ImageConfig
}

func measureSteps(ctx context.Context, cfg *config.Config, bins berthBinaries, ref string, n int, log *slog.Logger) (*stepTimings, error) {
	tmp, err := os.MkdirTemp("", "berth-timings.")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	cfg.Root, cfg.State = filepath.Join(tmp, "root"), filepath.Join(tmp, "state")
	e := &stepEnv{cfg: cfg, tmp: tmp, state: cfg.State, monitor: bins.monitor, pause: bins.pause, durs: map[string][]float64{}}
	if e.cni, err = network.NewCNI(network.Config{
		ConfDir: cfg.CNI.ConfDir, BinDirs: cfg.CNI.BinDirs, CacheDir: filepath.Join(cfg.State, "cni"),
	}, log); err != nil {
		return nil, err
	}
	if err := e.cni.Ready(ctx); err != nil {
		return nil, err
	}
	if e.netns, err = network.NewNetNS(filepath.Join(cfg.State, "netns")); err != nil {
		return nil, err
	}
	images, err := openImages(ctx, cfg, log)
	if err != nil {
		return nil, err
	}
	if _, err := images.Pull(ctx, ref, nil); err != nil {
		return nil, err
	}
	img, err := images.Status(ref)
	if err != nil {
		return nil, err
	}
	e.img = imageInfo{name: ref, lower: img.LowerDirs()}
	var raw struct {
		Config struct {
			User       string   `json:"User"`
			Env        []string `json:"Env"`
			Entrypoint []string `json:"Entrypoint"`
			Cmd        []string `json:"Cmd"`
			WorkingDir string   `json:"WorkingDir"`
		} `json:"config"`
	}
	if err := json.Unmarshal(img.Config, &raw); err != nil {
		return nil, fmt.Errorf("image config: %w", err)
	}
	e.img.config = spec.ImageConfig{User: raw.Config.User, Env: raw.Config.Env, Entrypoint: raw.Config.Entrypoint, Cmd: raw.Config.Cmd, WorkingDir: raw.Config.WorkingDir}

	// One untimed round first: page cache, the bridge, iptables chains.
	for i := range n + 1 {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if err := e.pod(ctx, i > 0); err != nil {
			return nil, err
		}
	}
	out := &stepTimings{Iterations: n}
	for _, s := range timedSteps {
		v := slices.Clone(e.durs[s.name])
		slices.Sort(v)
		if len(v) == 0 {
			continue
		}
		out.Steps = append(out.Steps, stepTiming{
			Name: s.name, Phase: s.phase, InSum: s.inSum,
			P50: v[(len(v)-1)/2], P90: v[min(len(v)-1, (len(v)*9+9)/10-1)],
			Samples: e.durs[s.name],
		})
	}
	return out, nil
}

func randomID() string {
	b := make([]byte, 32)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// pod makes one pod with one container, the way berth does, and takes it
// down again in berth's order, each step timed on its own. Whatever was
// made is released, also on failure.
func (e *stepEnv) pod(ctx context.Context, record bool) error {
	timed := func(name string, f func() error) error {
		start := time.Now()
		if err := f(); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		if record {
			e.durs[name] = append(e.durs[name], float64(time.Since(start).Microseconds())/1000)
		}
		return nil
	}
	// Each thing made has its release; teardown runs them timed, in
	// berth's order, and whatever is left is released at the end.
	type release struct {
		name string
		f    func() error
		done bool
	}
	var rels []*release
	made := func(name string, f func() error) *release {
		r := &release{name: name, f: f}
		rels = append(rels, r)
		return r
	}
	defer func() {
		for i := len(rels) - 1; i >= 0; i-- {
			if !rels[i].done {
				rels[i].f()
			}
		}
	}()
	teardown := func(r *release) error {
		r.done = true
		return timed(r.name, r.f)
	}
	bg := context.WithoutCancel(ctx)

	podID, ctrID := randomID(), randomID()
	cgParent := "/berth-timings-" + podID[:12]
	podDir := filepath.Join(e.state, "sandboxes", podID)
	if err := os.MkdirAll(podDir, 0o755); err != nil {
		return err
	}
	made("pod dir", func() error { return os.RemoveAll(podDir) })
	hostname := "timings-" + podID[:8]
	// The files every container bind-mounts (the sandbox writes them).
	files := map[string]string{
		"hostname":    hostname + "\n",
		"hosts":       "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n",
		"resolv.conf": "nameserver 10.96.0.10\nsearch timings.svc.cluster.local svc.cluster.local cluster.local\noptions ndots:5\n",
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(podDir, name), []byte(content), 0o644); err != nil {
			return err
		}
	}
	pcfg := &runtimeapi.PodSandboxConfig{
		Metadata: &runtimeapi.PodSandboxMetadata{Name: hostname, Namespace: "timings", Uid: podID[:32]},
		Hostname: hostname,
		Linux: &runtimeapi.LinuxPodSandboxConfig{CgroupParent: cgParent, SecurityContext: &runtimeapi.LinuxSandboxSecurityContext{
			NamespaceOptions: &runtimeapi.NamespaceOption{Pid: runtimeapi.NamespaceMode_CONTAINER},
		}},
	}
	// The pod cgroup as the sandbox service makes it (cgroupfs).
	parent, err := cgroup.Cgroupfs.Parent(cgParent)
	if err != nil {
		return err
	}
	podCg := parent.Child(podID)
	cg, err := podCg.Manager(nil)
	if err != nil {
		return err
	}
	cgRel := made("cgroup remove", func() error {
		err := cg.Destroy()
		removeCgroupParents(cgParent)
		return err
	})
	cgPaths, err := cg.Prepare()
	if err != nil {
		return err
	}

	var pin string
	if err := timed("netns create+pin", func() (err error) { pin, err = e.netns.Create(ctx, podID); return err }); err != nil {
		return err
	}
	pinRel := made("netns unpin", func() error { return e.netns.Remove(bg, pin) })
	npod := &network.Pod{ID: podID, Name: hostname, Namespace: "timings", UID: podID[:32], NetNS: pin, CgroupPath: cgParent}
	if err := timed("CNI ADD", func() error { _, err := e.cni.Setup(ctx, npod); return err }); err != nil {
		return err
	}
	cniRel := made("CNI DEL", func() error { return e.cni.Teardown(bg, npod) })

	// The pod's monitor, then pause as its child.
	paths := monitor.PathsFor(e.state, podID)
	mon := &monitor.Client{Socket: paths.Socket}
	// As in RunPodSandbox, where this runs beside CNI ADD: pause's move
	// into the pod cgroup, a few milliseconds from now, finds its RCU grace
	// period passed.
	cgprime.Prime()
	var monProc *os.Process
	if err := timed("monitor spawn", func() (err error) {
		monProc, err = monitor.Start(ctx, monitor.StartOptions{Binary: e.monitor, PodID: podID, Paths: paths, RuncRoot: filepath.Join(e.state, "runc")})
		return err
	}); err != nil {
		return err
	}
	// As berth ends a monitor: pause is gone (killed if not), its exit
	// recorded, then the monitor is told to go and reaped.
	monRel := made("monitor shutdown", func() error {
		defer os.RemoveAll(paths.Dir)
		defer os.Remove(paths.Socket)
		mon.Call(bg, &monitor.Request{Op: monitor.OpSignal, ID: podID, Signal: int(syscall.SIGKILL)})
		mon.Call(bg, &monitor.Request{Op: monitor.OpWait, ID: podID})
		if _, err := mon.Call(bg, &monitor.Request{Op: monitor.OpShutdown}); err != nil {
			monProc.Kill()
			monProc.Wait()
			return err
		}
		_, err := monProc.Wait()
		return err
	})
	var pause *sandbox.Process
	if err := timed("pause start (in the monitor)", func() error {
		args, env, err := sandbox.PauseCommand(&sandbox.PauseSpec{PodID: podID, Hostname: hostname}, e.pause)
		if err != nil {
			return err
		}
		resp, err := mon.Call(ctx, &monitor.Request{Op: monitor.OpRunPause, ID: podID, Pause: &monitor.PauseRequest{
			Args: args, Env: env, NetNS: pin, NewIPC: true, NewUTS: true, NewPID: true,
			Cgroup: podCg.SpecPath(), CgroupPaths: cgPaths, Dir: paths.Dir,
		}})
		if err != nil {
			return err
		}
		pause, err = sandbox.OpenProcess(resp.Pid, 0, nil)
		return err
	}); err != nil {
		return err
	}
	pauseRel := made("pause stop", func() error {
		defer pause.Close()
		return pause.Stop(bg, time.Second)
	})

	ctrDir := filepath.Join(e.state, "containers", ctrID)
	upper := filepath.Join(e.cfg.Root, "containers", ctrID)
	rootfs := filepath.Join(ctrDir, "rootfs")
	made("container dirs", func() error { os.RemoveAll(ctrDir); return os.RemoveAll(upper) })
	if err := timed("rootfs mount (overlay)", func() error {
		for _, d := range []string{filepath.Join(upper, "upper"), filepath.Join(upper, "work"), rootfs} {
			if err := os.MkdirAll(d, 0o755); err != nil {
				return err
			}
		}
		opts := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s",
			strings.Join(e.img.lower, ":"), filepath.Join(upper, "upper"), filepath.Join(upper, "work"))
		return syscall.Mount("overlay", rootfs, "overlay", 0, opts)
	}); err != nil {
		return err
	}
	umountRel := made("rootfs unmount", func() error { return syscall.Unmount(rootfs, syscall.MNT_DETACH) })

	ccfg := &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: "sleep"},
		Image:    &runtimeapi.ImageSpec{Image: e.img.name},
		Command:  []string{"sleep", "3600"},
		Linux: &runtimeapi.LinuxContainerConfig{
			Resources:       &runtimeapi.LinuxContainerResources{CpuShares: 2, CpuPeriod: 100000, OomScoreAdj: 1000},
			SecurityContext: &runtimeapi.LinuxContainerSecurityContext{NamespaceOptions: pcfg.Linux.SecurityContext.NamespaceOptions},
		},
	}
	if err := timed("spec build+write", func() error {
		oci, err := spec.Build(&spec.Input{
			ID: ctrID, Config: ccfg, Image: e.img.config, ImageName: e.img.name, Rootfs: rootfs,
			Pod: spec.Pod{
				ID: podID, Config: pcfg, NetNSPath: pin, PausePID: pause.Pid(), CgroupParent: parent,
				HostnamePath:   filepath.Join(podDir, "hostname"),
				HostsPath:      filepath.Join(podDir, "hosts"),
				ResolvConfPath: filepath.Join(podDir, "resolv.conf"),
			},
			Host: spec.SystemHost{}, Files: spec.DirFS(rootfs),
		})
		if err != nil {
			return err
		}
		data, err := json.Marshal(oci)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(ctrDir, monitor.SpecFile), data, 0o600)
	}); err != nil {
		return err
	}
	if err := timed("container create (libcontainer)", func() error {
		_, err := mon.Call(ctx, &monitor.Request{Op: monitor.OpCreate, ID: ctrID, Create: &monitor.CreateRequest{Dir: ctrDir}})
		return err
	}); err != nil {
		return err
	}
	deleteRel := made("container delete", func() error {
		_, err := mon.Call(bg, &monitor.Request{Op: monitor.OpDelete, ID: ctrID})
		return err
	})
	killRel := made("container kill+wait", func() error {
		if _, err := mon.Call(bg, &monitor.Request{Op: monitor.OpSignal, ID: ctrID, Signal: int(syscall.SIGKILL)}); err != nil {
			return err
		}
		_, err := mon.Call(bg, &monitor.Request{Op: monitor.OpWait, ID: ctrID})
		return err
	})
	if err := timed("container start", func() error {
		_, err := mon.Call(ctx, &monitor.Request{Op: monitor.OpStart, ID: ctrID})
		return err
	}); err != nil {
		return err
	}

	// StopContainer, RemoveContainer, StopPodSandbox, RemovePodSandbox.
	for _, r := range []*release{killRel, deleteRel, umountRel, pauseRel, monRel, cniRel, pinRel, cgRel} {
		if err := teardown(r); err != nil {
			return err
		}
	}
	return nil
}

// removeCgroupParents removes the per-pod parent directory (which the
// kubelet would own) from every hierarchy.
func removeCgroupParents(parent string) {
	entries, err := os.ReadDir("/sys/fs/cgroup")
	if err != nil {
		return
	}
	syscall.Rmdir(filepath.Join("/sys/fs/cgroup", parent))
	for _, e := range entries {
		syscall.Rmdir(filepath.Join("/sys/fs/cgroup", e.Name(), parent))
	}
}
