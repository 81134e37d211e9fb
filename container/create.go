package container

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/container/spec"
	"github.com/berth-runtime/berth/internal/cgprime"
	"github.com/berth-runtime/berth/internal/errdefs"
	"github.com/berth-runtime/berth/internal/faultpoint"
	"github.com/berth-runtime/berth/internal/procstate"
	"github.com/berth-runtime/berth/internal/reserve"
	"github.com/berth-runtime/berth/internal/steps"
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
	var src *restoreSource
	if location, ok := archivePath(cfg.GetImage().GetImage()); ok {
		if src, cfg, err = s.prepareRestore(pod.ID, location, cfg); err != nil {
			return "", err
		}
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
		if _, err := s.create(ctx, id, pod.Pod, cfg, podCfg, false, src); err != nil {
			return err
		}
		if src != nil && src.desc.TCPEstablished {
			s.holdResets(pod.ID, pod.NetNSPath)
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
// steps done, after it by undoCreate, the release recovery uses. With
// src, the container is to be restored from that checkpoint archive
// (restore.go): its rootfs gets the checkpointed writable layer, and the
// pod's process learns of it only at its start.
func (s *Service) create(ctx context.Context, id string, pod spec.Pod, cfg *runtimeapi.ContainerConfig, podCfg *runtimeapi.PodSandboxConfig, sandbox bool, src *restoreSource) (_ *ctr, err error) {
	c := &creation{s: s, pod: pod, cfg: cfg, podCfg: podCfg, sandbox: sandbox, restore: src,
		run: &steps.Runner{Kind: "container", ID: id, Tracer: s.opts.Tracer, Faults: s.opts.Faults}}
	c.rec.ID = id
	defer func() {
		if err != nil {
			err = c.undo(ctx, err)
		}
	}()
	// Closed before the undo, which needs no id-mapped layers.
	defer func() { c.idm.close() }()
	if !sandbox {
		// On the call's span: the server learns the id only once the
		// create returns.
		trace.SpanFromContext(ctx).SetAttributes(tracing.ContainerID.String(id))
	}
	nri := !sandbox && s.opts.NRI.Enabled()
	err = c.run.Run(ctx,
		steps.Step{Name: "image lease", Fault: c.fault(faultpoint.CreateLeased), Do: c.leaseImage},
		steps.Step{Name: "image volume leases", Do: c.leaseVolumes},
		steps.Step{Name: "record", Fault: c.fault(faultpoint.CreateRecorded), Do: c.record},
		steps.Step{Name: "id-mapped layers", Skip: podUserNS(podCfg) == nil, Do: c.openIDMap},
		steps.Step{Do: func(context.Context) error { return makeContainerDir(c.rec.Dir, c.idm) }},
		steps.Step{Name: "rootfs mount", Span: "rootfs mount", Fault: c.fault(faultpoint.CreateRootfs), Do: c.mountRootfs},
		steps.Step{Name: "checkpoint archive", Span: "checkpoint archive", Skip: src == nil, Do: c.restoreRootfs},
		steps.Step{Do: c.mountVolumes},
		steps.Step{Name: "OCI spec", Span: "OCI spec", Do: c.buildSpec},
		steps.Step{Name: "NRI CreateContainer", Skip: !nri, Do: func(ctx context.Context) error {
			return s.nriCreate(ctx, &c.rec, cfg, c.oci, &c.cleanups)
		}},
		steps.Step{Do: c.writeSpec},
		steps.Step{Name: "monitor create (libcontainer)", Span: "libcontainer create", Skip: src != nil, Fault: c.monitorFault(), Do: c.monitorCreate},
		steps.Step{Name: "record created", Do: c.recordCreated},
	)
	if err != nil {
		return nil, err
	}
	return c.publish(ctx, nri), nil
}

// creation is one create under way: what its steps made so far.
type creation struct {
	s       *Service
	run     *steps.Runner
	pod     spec.Pod
	cfg     *runtimeapi.ContainerConfig
	podCfg  *runtimeapi.PodSandboxConfig
	sandbox bool
	restore *restoreSource

	// cleanups undo the steps done: before the record is written all of
	// them, after it those that its release does not (NRI's).
	cleanups   []cleanup
	rec        Record
	recorded   bool
	img        *Image
	imgCfg     spec.ImageConfig
	volLayers  [][]string
	idm        *idmap
	volSources map[int]string
	oci        *specs.Spec
	specJSON   []byte
	mon        pods.Client
}

// fault is the fault point name, which a sandbox's create has not.
func (c *creation) fault(name string) string {
	if c.sandbox {
		return ""
	}
	return name
}

func (c *creation) monitorFault() string {
	if c.sandbox {
		return faultpoint.RunInfraCreated
	}
	return faultpoint.CreateMonitor
}

func (c *creation) leaseImage(ctx context.Context) error {
	id, ref, images := c.rec.ID, c.cfg.GetImage().GetImage(), c.s.opts.Images
	if c.restore != nil {
		ref = c.restore.image
	}
	img, err := images.Lease(ctx, id, ref)
	if c.sandbox && errors.Is(err, errdefs.ErrNotFound) {
		reserve.Step(ctx, "sandbox image pull")
		if err = images.Pull(ctx, ref); err == nil {
			img, err = images.Lease(ctx, id, ref)
		}
	}
	if err != nil && c.restore != nil {
		return restoreImageError(c.restore, err)
	}
	if err != nil {
		return fmt.Errorf("image %s: %w", ref, err)
	}
	c.cleanups = append(c.cleanups, cleanup{"release image lease", func(ctx context.Context) error { return images.Release(ctx, id) }})
	c.img = img
	c.imgCfg, err = parseImageConfig(img.Config)
	return err
}

func (c *creation) leaseVolumes(ctx context.Context) error {
	c.rec.Dir = filepath.Join(c.s.dir, c.rec.ID)
	vols, err := planImageVolumes(c.rec.ID, c.rec.Dir, c.cfg)
	if err != nil {
		return err
	}
	c.rec.ImageVolumes = vols
	c.cleanups = append(c.cleanups, cleanup{"release image volume leases", func(ctx context.Context) error { return c.s.releaseImageVolumes(ctx, vols) }})
	c.volLayers, err = c.s.leaseImageVolumes(ctx, c.cfg, vols)
	return err
}

// record writes the Creating record first, so that a crash from here on
// is undone by recovery, and a failure by the same release (undoCreate),
// which the record's image and volume leases are part of.
func (c *creation) record(context.Context) error {
	id, cfg, img, err := c.rec.ID, c.cfg, c.img, error(nil)
	c.rec = Record{
		ID: id, PodID: c.pod.ID, State: StateCreating, ImageID: img.ID, ImageRef: imageRef(img),
		CreatedAt: time.Now().UnixNano(), Dir: c.rec.Dir, Upper: filepath.Join(c.s.upper, id), StopSignal: c.imgCfg.StopSignal,
		Sandbox: c.sandbox, ImageVolumes: c.rec.ImageVolumes, Restore: c.restore != nil,
		TCPEstablished: c.restore != nil && c.restore.desc.TCPEstablished,
	}
	if c.rec.Config, err = proto.Marshal(cfg); err != nil {
		return err
	}
	if r := cfg.GetLinux().GetResources(); r != nil {
		c.rec.Resources, _ = proto.Marshal(r)
	}
	if lp := cfg.GetLogPath(); lp != "" {
		c.rec.LogPath = filepath.Join(c.podCfg.GetLogDirectory(), lp)
		if !filepath.IsAbs(c.rec.LogPath) {
			return fmt.Errorf("%w: log_path: %q under log directory %q is not absolute", ErrInvalid, lp, c.podCfg.GetLogDirectory())
		}
	}
	if err := c.s.records.Put(id, &c.rec); err != nil {
		return err
	}
	c.recorded, c.cleanups = true, nil
	return nil
}

func (c *creation) openIDMap(context.Context) (err error) {
	if c.sandbox {
		return fmt.Errorf("%w: a pause image cannot run in a user namespace", ErrInvalid)
	}
	c.idm, err = openIDMap(podUserNS(c.podCfg), c.pod.PausePID, c.rec.Dir)
	return err
}

func (c *creation) mountRootfs(ctx context.Context) error {
	trace.SpanFromContext(ctx).SetAttributes(attribute.Int("layers", len(c.img.LowerDirs)))
	return mountRootfs(c.rec.ID, c.img.LowerDirs, c.rec.Upper, c.rootfs(), c.idm)
}

func (c *creation) rootfs() string { return filepath.Join(c.rec.Dir, "rootfs") }

func (c *creation) mountVolumes(context.Context) (err error) {
	c.volSources, err = mountImageVolumes(c.cfg, c.rec.ImageVolumes, c.volLayers, c.idm)
	return err
}

func (c *creation) buildSpec(ctx context.Context) (err error) {
	id, cfg := c.rec.ID, c.cfg
	in := &spec.Input{
		ID: id, Config: cfg, Image: c.imgCfg, ImageName: cfg.GetImage().GetImage(), Rootfs: c.rootfs(),
		Pod: c.pod, Host: c.s.guardedHost(ctx), Files: spec.DirFS(c.rootfs()), Sandbox: c.sandbox, ImageVolumes: c.volSources,
		CDI: c.s.opts.CDI,
	}
	in.Pod.Config = c.podCfg
	if ns := cfg.GetLinux().GetSecurityContext().GetNamespaceOptions(); ns.GetTargetId() != "" && ns.GetPid() == runtimeapi.NamespaceMode_TARGET {
		if in.TargetPID, err = c.s.targetPID(ns.GetTargetId(), c.pod.ID); err != nil {
			return err
		}
	}
	if c.s.opts.CDI == nil && !c.sandbox {
		if names, _ := spec.CDIDevices(cfg); len(names) > 0 {
			c.s.log.Warn("CDI devices ignored: CDI is off (enable_cdi = false)", "container", id, "devices", names)
		}
	}
	c.oci, err = spec.Build(in)
	switch {
	case err != nil && spec.IsInvalid(err):
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	case err != nil && spec.IsNotFound(err):
		return fmt.Errorf("%w: %w", ErrNotFound, err)
	}
	return err
}

func (c *creation) writeSpec(context.Context) (err error) {
	user := c.oci.Process.User
	c.rec.UID, c.rec.GID = int64(user.UID), int64(user.GID)
	for _, g := range user.AdditionalGids {
		c.rec.Groups = append(c.rec.Groups, int64(g))
	}
	if c.specJSON, err = json.Marshal(c.oci); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(c.rec.Dir, monitor.SpecFile), c.specJSON, 0o600); err != nil {
		return err
	}
	if c.rec.LogPath != "" {
		if err := os.MkdirAll(filepath.Dir(c.rec.LogPath), 0o755); err != nil {
			return fmt.Errorf("log directory: %w", err)
		}
	}
	return nil
}

// monitorCreate has the pod's monitor have berth-spawn run libcontainer's
// create: its span is the whole round trip, the helper's exec included.
func (c *creation) monitorCreate(ctx context.Context) error {
	c.mon = c.s.podProc(c.pod.ID)
	pid, err := c.mon.Create(ctx, c.rec.ID, &monitor.CreateRequest{
		Dir: c.rec.Dir, LogPath: c.rec.LogPath, Stdin: c.cfg.GetStdin(), StdinOnce: c.cfg.GetStdinOnce(),
	}, c.cfg.GetTty())
	if errors.Is(err, monitor.ErrUnreachable) {
		return fmt.Errorf("%w: the monitor of pod %s is gone: %w", ErrState, c.pod.ID, err)
	}
	if err != nil {
		return err
	}
	c.rec.Pid = pid
	return nil
}

func (c *creation) recordCreated(context.Context) error {
	if c.rec.Pid > 0 {
		c.rec.PidStart = procstate.StartTime(c.rec.Pid)
	}
	c.rec.State = StateCreated
	return c.s.records.Put(c.rec.ID, &c.rec)
}

// publish makes the created container known: listed, watched, announced.
func (c *creation) publish(ctx context.Context, nri bool) *ctr {
	s, rec := c.s, c.rec
	ct := &ctr{rec: rec, cfg: c.cfg, resources: c.cfg.GetLinux().GetResources(), spec: c.specJSON, exited: make(chan struct{})}
	if rec.Resources != nil && nri {
		ct.resources = decodeResources(rec.Resources) // as NRI adjusted them
	}
	s.mu.Lock()
	s.ctrs[rec.ID] = ct
	s.mu.Unlock()
	s.publish(runtimeapi.ContainerEventType_CONTAINER_CREATED_EVENT, &rec)
	// A container to restore is watched once its restore made it.
	if c.restore == nil {
		go s.watch(ct, c.mon)
	}
	if nri {
		s.opts.NRI.PostCreateContainer(ctx, ct.nriDescribe())
	}
	return ct
}

// undo undoes a create that failed with err: before the record is written
// by the cleanups of the steps done, after it by undoCreate. A container
// whose undo fails is kept (keepFailed).
func (c *creation) undo(ctx context.Context, err error) error {
	uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), undoTimeout)
	defer cancel()
	if !c.recorded {
		if uerr := c.s.runCleanups(uctx, c.rec.ID, c.cleanups); uerr != nil {
			err = fmt.Errorf("%w; undo: %w", err, uerr)
		}
		return err
	}
	if uerr := c.s.undoCreate(uctx, c.s.podProc(c.pod.ID), &c.rec, c.cleanups); uerr != nil {
		c.s.keepFailed(&c.rec, c.cfg, err, uerr)
		err = reserve.Kept(fmt.Errorf("%w; its undo failed, so the container is kept, exited, until it is removed: %w", err, uerr))
	}
	return err
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
