package container

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/container/spec"
	"github.com/berth-runtime/berth/internal/cgprime"
	"github.com/berth-runtime/berth/internal/faultpoint"
	"github.com/berth-runtime/berth/internal/procstate"
	"github.com/berth-runtime/berth/internal/reserve"
	"github.com/berth-runtime/berth/internal/tracing"
	"github.com/berth-runtime/berth/monitor"
	"github.com/berth-runtime/berth/monitor/pods"
)

// Create is CreateContainer: it returns the new container's id. A call
// for a name (pod, name, attempt) another call is creating waits for it
// and returns its container, as one whose caller gave up before it got
// the answer (internal/reserve): the kubelet retries a create that
// outlived its deadline, and the work goes on detached from it. A failed
// create undoes everything it did. cfg has a name and an image (the
// server checks).
func (s *Service) Create(ctx context.Context, podID string, cfg *runtimeapi.ContainerConfig, podCfg *runtimeapi.PodSandboxConfig) (string, error) {
	pod, err := s.opts.Pods.Pod(ctx, podID)
	if err != nil {
		return "", err
	}
	if !pod.Ready {
		return "", fmt.Errorf("%w: pod sandbox %s is not ready", ErrState, pod.ID)
	}
	if podCfg == nil {
		podCfg = pod.Config
	}
	return s.names.Create(ctx, nameKey(pod.ID, cfg.GetMetadata()), func(ctx context.Context, id string) error {
		// libcontainer moves the container's init into its cgroup some
		// 5–20 ms from now (lease, records, rootfs, spec, the re-exec as
		// init): the RCU grace period that move would wait for passes
		// meanwhile.
		cgprime.Prime()
		// A plugin connecting meanwhile learns of the container either
		// way.
		ctx, unblock := s.opts.NRI.BlockSync(ctx)
		defer unblock()
		if _, err := s.create(ctx, id, pod.Pod, cfg, podCfg, false); err != nil {
			return err
		}
		s.opts.Faults.Hit(faultpoint.CreateReturning, id)
		return nil
	})
}

// undoTimeout bounds the undo of a failed create, which runs on when the
// call's own time is up.
const undoTimeout = time.Minute

// create makes container id of pod: image lease, rootfs, spec, and the
// monitor's create. A sandbox (infra) container's image is pulled if it
// is missing, as containerd pulls its sandbox image. On error everything
// is undone: before the record is written by the named cleanups of the
// steps done, after it by undoCreate, the release recovery uses.
func (s *Service) create(ctx context.Context, id string, pod spec.Pod, cfg *runtimeapi.ContainerConfig, podCfg *runtimeapi.PodSandboxConfig, sandbox bool) (_ *ctr, err error) {
	var (
		cleanups []cleanup
		rec      Record
		recorded bool
	)
	defer func() {
		if err == nil {
			return
		}
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), undoTimeout)
		defer cancel()
		if !recorded {
			if uerr := s.runCleanups(uctx, id, cleanups); uerr != nil {
				err = fmt.Errorf("%w; undo: %w", err, uerr)
			}
			return
		}
		if uerr := s.undoCreate(uctx, s.podProc(pod.ID), &rec, cleanups); uerr != nil {
			s.keepFailed(&rec, cfg, err, uerr)
			err = reserve.Kept(fmt.Errorf("%w; its undo failed, so the container is kept, exited, until it is removed: %w", err, uerr))
		}
	}()

	if !sandbox {
		// On the call's span: the server learns the id only once the
		// create returns.
		trace.SpanFromContext(ctx).SetAttributes(tracing.ContainerID.String(id))
	}
	reserve.Step(ctx, "image lease")
	img, err := s.opts.Images.Lease(ctx, id, cfg.GetImage().GetImage())
	if sandbox && errors.Is(err, ErrNotFound) {
		reserve.Step(ctx, "sandbox image pull")
		if err = s.opts.Images.Pull(ctx, cfg.GetImage().GetImage()); err == nil {
			img, err = s.opts.Images.Lease(ctx, id, cfg.GetImage().GetImage())
		}
	}
	if err != nil {
		return nil, fmt.Errorf("container %s: image %s: %w", id, cfg.GetImage().GetImage(), err)
	}
	cleanups = append(cleanups, cleanup{"release image lease", func(ctx context.Context) error { return s.opts.Images.Release(ctx, id) }})
	if !sandbox {
		s.opts.Faults.Hit(faultpoint.CreateLeased, id)
	}
	imgCfg, err := parseImageConfig(img.Config)
	if err != nil {
		return nil, fmt.Errorf("container %s: %w", id, err)
	}

	dir := filepath.Join(s.dir, id)
	upper := filepath.Join(s.upper, id)
	rootfs := filepath.Join(dir, "rootfs")
	vols, err := planImageVolumes(id, dir, cfg)
	if err != nil {
		return nil, err
	}
	cleanups = append(cleanups, cleanup{"release image volume leases", func(ctx context.Context) error { return s.releaseImageVolumes(ctx, vols) }})
	reserve.Step(ctx, "image volume leases")
	volLayers, err := s.leaseImageVolumes(ctx, cfg, vols)
	if err != nil {
		return nil, fmt.Errorf("container %s: %w", id, err)
	}
	rec = Record{
		ID: id, PodID: pod.ID, State: StateCreating, ImageID: img.ID, ImageRef: imageRef(img),
		CreatedAt: time.Now().UnixNano(), Dir: dir, Upper: upper, StopSignal: imgCfg.StopSignal,
		Sandbox: sandbox, ImageVolumes: vols,
	}
	if rec.Config, err = proto.Marshal(cfg); err != nil {
		return nil, fmt.Errorf("container %s: %w", id, err)
	}
	if r := cfg.GetLinux().GetResources(); r != nil {
		rec.Resources, _ = proto.Marshal(r)
	}
	if lp := cfg.GetLogPath(); lp != "" {
		rec.LogPath = filepath.Join(podCfg.GetLogDirectory(), lp)
		if !filepath.IsAbs(rec.LogPath) {
			return nil, fmt.Errorf("%w: log_path: %q under log directory %q is not absolute", ErrInvalid, lp, podCfg.GetLogDirectory())
		}
	}
	// Written first, so that a crash from here on is undone by recovery,
	// and a failure by the same release (undoCreate), which the record's
	// image and volume leases are part of.
	reserve.Step(ctx, "record")
	if err := s.records.Put(id, &rec); err != nil {
		return nil, fmt.Errorf("container %s: %w", id, err)
	}
	recorded, cleanups = true, nil
	if !sandbox {
		s.opts.Faults.Hit(faultpoint.CreateRecorded, id)
	}
	var idm *idmap
	if u := podUserNS(podCfg); u != nil {
		if sandbox {
			return nil, fmt.Errorf("%w: container %s: a pause image cannot run in a user namespace", ErrInvalid, id)
		}
		reserve.Step(ctx, "id-mapped layers")
		if idm, err = openIDMap(u, pod.PausePID, dir); err != nil {
			return nil, fmt.Errorf("container %s: %w", id, err)
		}
		defer idm.close()
	}
	if err := makeContainerDir(dir, idm); err != nil {
		return nil, fmt.Errorf("container %s: %w", id, err)
	}
	reserve.Step(ctx, "rootfs mount")
	_, span := s.opts.Tracer.Start(ctx, "rootfs mount", trace.WithAttributes(attribute.Int("layers", len(img.LowerDirs))))
	err = mountRootfs(id, img.LowerDirs, upper, rootfs, idm)
	tracing.End(span, err)
	if err != nil {
		return nil, err
	}
	if !sandbox {
		s.opts.Faults.Hit(faultpoint.CreateRootfs, id)
	}
	volSources, err := mountImageVolumes(cfg, vols, volLayers, idm)
	if err != nil {
		return nil, fmt.Errorf("container %s: %w", id, err)
	}

	reserve.Step(ctx, "OCI spec")
	in := &spec.Input{
		ID: id, Config: cfg, Image: imgCfg, ImageName: cfg.GetImage().GetImage(), Rootfs: rootfs,
		Pod: pod, Host: s.guardedHost(ctx), Files: spec.DirFS(rootfs), Sandbox: sandbox, ImageVolumes: volSources,
		CDI: s.opts.CDI,
	}
	in.Pod.Config = podCfg
	if target := cfg.GetLinux().GetSecurityContext().GetNamespaceOptions().GetTargetId(); target != "" &&
		cfg.GetLinux().GetSecurityContext().GetNamespaceOptions().GetPid() == runtimeapi.NamespaceMode_TARGET {
		if in.TargetPID, err = s.targetPID(target, pod.ID); err != nil {
			return nil, err
		}
	}
	if s.opts.CDI == nil && !sandbox {
		if names, _ := spec.CDIDevices(cfg); len(names) > 0 {
			s.log.Warn("CDI devices ignored: CDI is off (enable_cdi = false)", "container", id, "devices", names)
		}
	}
	_, span = s.opts.Tracer.Start(ctx, "OCI spec")
	oci, err := spec.Build(in)
	tracing.End(span, err)
	if err != nil {
		if spec.IsInvalid(err) {
			return nil, fmt.Errorf("%w: container %s: %w", ErrInvalid, id, err)
		}
		if spec.IsNotFound(err) {
			return nil, fmt.Errorf("%w: container %s: %w", ErrNotFound, id, err)
		}
		return nil, fmt.Errorf("container %s: %w", id, err)
	}
	if !sandbox && s.opts.NRI.Enabled() {
		reserve.Step(ctx, "NRI CreateContainer")
		if err := s.nriCreate(ctx, &rec, cfg, oci, &cleanups); err != nil {
			return nil, err
		}
	}
	rec.UID, rec.GID = int64(oci.Process.User.UID), int64(oci.Process.User.GID)
	for _, g := range oci.Process.User.AdditionalGids {
		rec.Groups = append(rec.Groups, int64(g))
	}
	specJSON, err := json.Marshal(oci)
	if err != nil {
		return nil, fmt.Errorf("container %s: %w", id, err)
	}
	if err := os.WriteFile(filepath.Join(dir, monitor.SpecFile), specJSON, 0o600); err != nil {
		return nil, fmt.Errorf("container %s: %w", id, err)
	}
	if rec.LogPath != "" {
		if err := os.MkdirAll(filepath.Dir(rec.LogPath), 0o755); err != nil {
			return nil, fmt.Errorf("container %s: log directory: %w", id, err)
		}
	}

	reserve.Step(ctx, "monitor create (libcontainer)")
	mon := s.podProc(pod.ID)
	// The monitor has berth-spawn run libcontainer's create: the span is
	// the whole round trip, the helper's exec included.
	_, span = s.opts.Tracer.Start(ctx, "libcontainer create")
	pid, err := mon.Create(ctx, id, &monitor.CreateRequest{
		Dir: dir, LogPath: rec.LogPath, Stdin: cfg.GetStdin(), StdinOnce: cfg.GetStdinOnce(),
	}, cfg.GetTty())
	tracing.End(span, err)
	if err != nil {
		if errors.Is(err, monitor.ErrUnreachable) {
			return nil, fmt.Errorf("%w: container %s: the monitor of pod %s is gone: %w", ErrState, id, pod.ID, err)
		}
		return nil, fmt.Errorf("container %s: %w", id, err)
	}
	if sandbox {
		s.opts.Faults.Hit(faultpoint.RunInfraCreated, id)
	} else {
		s.opts.Faults.Hit(faultpoint.CreateMonitor, id)
	}
	rec.Pid = pid
	rec.PidStart = procstate.StartTime(pid)
	rec.State = StateCreated
	reserve.Step(ctx, "record created")
	if err := s.records.Put(id, &rec); err != nil {
		return nil, fmt.Errorf("container %s: %w", id, err)
	}
	c := &ctr{rec: rec, cfg: cfg, resources: cfg.GetLinux().GetResources(), spec: specJSON, exited: make(chan struct{})}
	if rec.Resources != nil && !sandbox && s.opts.NRI.Enabled() {
		c.resources = decodeResources(rec.Resources) // as NRI adjusted them
	}
	s.mu.Lock()
	s.ctrs[id] = c
	s.mu.Unlock()
	s.publish(runtimeapi.ContainerEventType_CONTAINER_CREATED_EVENT, &rec)
	go s.watch(c, mon)
	if !sandbox && s.opts.NRI.Enabled() {
		s.opts.NRI.PostCreateContainer(ctx, c.nriDescribe())
	}
	return c, nil
}

// cleanup undoes one step of a create done before its record exists.
type cleanup struct {
	step string
	f    func(context.Context) error
}

// runCleanups runs the cleanups of a failed create, last step first,
// each failure logged with the container and the step.
func (s *Service) runCleanups(ctx context.Context, id string, cleanups []cleanup) error {
	var errs []error
	for i := len(cleanups) - 1; i >= 0; i-- {
		if err := cleanups[i].f(ctx); err != nil {
			s.log.Warn("undo CreateContainer: step failed", "container", id, "step", cleanups[i].step, "error", err)
			errs = append(errs, fmt.Errorf("%s: %w", cleanups[i].step, err))
		}
	}
	return errors.Join(errs...)
}

// undoCreate releases a container whose create did not finish, from its
// record: a failed create and recovery after a crash inside one both come
// here. The monitor may hold it (its init waiting for a start that will
// never come) and refuses to delete a live one, or may still be making it
// (for a create that timed out on our side, or for the berth that died):
// a status call waits for that to end, so that the kill finds a process
// to kill. cleanups (NRI's) run once it is dead.
func (s *Service) undoCreate(ctx context.Context, mon pods.Client, rec *Record, cleanups []cleanup) error {
	mon.Status(ctx, rec.ID)
	s.monitorDelete(ctx, mon, rec.ID)
	s.opts.Faults.Hit(faultpoint.RecoverCtrKilled, rec.ID)
	// Logged by runCleanups: the container is gone once released, what
	// a plugin thinks of it is the plugin's.
	s.runCleanups(ctx, rec.ID, cleanups)
	if err := s.release(ctx, rec); err != nil {
		s.log.Warn("undo CreateContainer: step failed", "container", rec.ID, "step", "release", "error", err)
		return err
	}
	return nil
}

// keepFailed keeps a container whose create failed and whose release
// failed too, exited, so that RemoveContainer (or the pod's removal)
// retries the release instead of its layer, mounts and leases leaking.
func (s *Service) keepFailed(rec *Record, cfg *runtimeapi.ContainerConfig, cause, uerr error) {
	rec.State, rec.Reason = StateExited, ReasonCreateFailed
	rec.Exit = &monitor.Exit{Code: 128, FinishedAt: time.Now(), Message: fmt.Sprintf("create failed (%v) and its undo too (%v)", cause, uerr)}
	if err := s.records.Put(rec.ID, rec); err != nil {
		s.log.Error("record failed create", "container", rec.ID, "error", err)
	}
	c := &ctr{rec: *rec, cfg: cfg, resources: cfg.GetLinux().GetResources(), exited: make(chan struct{})}
	close(c.exited)
	s.mu.Lock()
	s.ctrs[rec.ID] = c
	s.mu.Unlock()
	s.log.Warn("failed CreateContainer not undone: container kept, exited, for RemoveContainer to release", "container", rec.ID, "pod", rec.PodID, "error", uerr)
}

// monitorDelete kills and forgets a container in its monitor, for undo.
func (s *Service) monitorDelete(ctx context.Context, mon pods.Client, id string) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := mon.Signal(ctx, id, 9); err != nil &&
		(errors.Is(err, monitor.ErrUnreachable) || monitor.IsCode(err, monitor.CodeNotFound)) {
		return
	}
	mon.Wait(ctx, id)
	mon.Delete(ctx, id)
}

func (s *Service) targetPID(target, podID string) (int, error) {
	t, err := s.lookup(target)
	if err != nil {
		return 0, fmt.Errorf("%w: linux.security_context.namespace_options.target_id: %w", ErrInvalid, err)
	}
	rec := t.snapshot()
	if rec.PodID != podID || rec.State != StateRunning {
		return 0, fmt.Errorf("%w: linux.security_context.namespace_options.target_id: container %s is not running in pod %s", ErrInvalid, target, podID)
	}
	return rec.Pid, nil
}

func imageRef(img *Image) string {
	if len(img.RepoDigests) > 0 {
		return img.RepoDigests[0]
	}
	return img.ID
}

func parseImageConfig(raw []byte) (spec.ImageConfig, error) {
	var f struct {
		Config struct {
			User       string   `json:"User"`
			Env        []string `json:"Env"`
			Entrypoint []string `json:"Entrypoint"`
			Cmd        []string `json:"Cmd"`
			WorkingDir string   `json:"WorkingDir"`
			StopSignal string   `json:"StopSignal"`
		} `json:"config"`
	}
	if len(raw) == 0 {
		return spec.ImageConfig{}, nil
	}
	if err := json.Unmarshal(raw, &f); err != nil {
		return spec.ImageConfig{}, fmt.Errorf("decode image config: %w", err)
	}
	c := f.Config
	return spec.ImageConfig{User: c.User, Env: c.Env, Entrypoint: c.Entrypoint, Cmd: c.Cmd, WorkingDir: c.WorkingDir, StopSignal: c.StopSignal}, nil
}
