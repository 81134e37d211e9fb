package sandbox

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/proto"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/internal/cgprime"
	"github.com/berth-runtime/berth/internal/faultpoint"
	"github.com/berth-runtime/berth/internal/reserve"
	"github.com/berth-runtime/berth/internal/steps"
	"github.com/berth-runtime/berth/internal/tracing"
	"github.com/berth-runtime/berth/network"
)

// Run creates and starts a pod sandbox and returns its id. A call for a
// name (name, namespace, uid, attempt) that another call is creating
// waits for it and returns its pod; one for a name that exists returns it
// (internal/reserve). The work goes on when its caller gives up, so that
// the kubelet's retry finds it done.
func (m *Manager) Run(ctx context.Context, cfg *runtimeapi.PodSandboxConfig, handler string) (string, error) {
	return m.names.Create(ctx, nameKey(cfg.GetMetadata()), func(ctx context.Context, id string) error {
		return m.run(ctx, id, cfg, handler)
	})
}

func (m *Manager) run(ctx context.Context, id string, cfg *runtimeapi.PodSandboxConfig, handler string) error {
	r := &podRun{m: m, cfg: cfg, start: time.Now(), userNS: userNamespace(cfg),
		run: &steps.Runner{Kind: "pod", ID: id, Tracer: m.opts.Tracer, Faults: m.opts.Faults}}
	r.hostNet, r.hostPID, r.hostIPC = namespaces(cfg)
	// On the call's span: the server learns the id only once Run returns.
	trace.SpanFromContext(ctx).SetAttributes(tracing.PodID.String(id))
	err := r.run.Run(ctx,
		steps.Step{Do: r.check},
		steps.Step{Do: func(context.Context) error { return r.plan(id, handler) }},
		steps.Step{Name: "record", Fault: faultpoint.RunRecorded, Do: r.record},
	)
	if err != nil {
		return err
	}
	if err := r.create(ctx); err != nil {
		return m.fail(ctx, r.p, r.cg, err)
	}
	// Plugins see the pod before anyone else does: not listed, and no
	// container can be created in it, until they have answered.
	var unblock func()
	err = r.run.Do(ctx, steps.Step{Name: "NRI RunPodSandbox", Do: func(ctx context.Context) error {
		var nctx context.Context
		nctx, unblock = m.opts.NRI.BlockSync(ctx)
		return m.nriRun(nctx, r.p)
	}})
	defer unblock()
	if err != nil {
		// Pause runs and is watched: the watcher must not see its stop as
		// a death.
		r.p.op.Lock("RunPodSandbox")
		defer r.p.op.Unlock()
		return m.fail(ctx, r.p, r.cg, err)
	}
	m.add(r.p)
	m.publishStarted(id)
	m.opts.Faults.Hit(faultpoint.RunReady, id)
	r.logReady()
	return nil
}

// podRun is one RunPodSandbox under way: what its steps made so far.
type podRun struct {
	m      *Manager
	run    *steps.Runner
	cfg    *runtimeapi.PodSandboxConfig
	start  time.Time
	userNS *runtimeapi.UserNamespace

	hostNet, hostPID, hostIPC bool

	p     *pod
	cg    *podCgroup
	files podFiles
	pause *PauseSpec
	proc  *Process
	// CNI ADD runs beside pause: its result is read once wg is done.
	wg     sync.WaitGroup
	netRes *network.Result
	netErr error
}

// check refuses a config pause could not run.
func (r *podRun) check(context.Context) error {
	if r.userNS != nil && (r.hostPID || r.hostIPC) {
		return fmt.Errorf("%w: a pod in its own user namespace cannot share the node's PID or IPC namespace", ErrInvalid)
	}
	return checkSysctls(r.cfg.GetLinux().GetSysctls(), r.hostNet, r.hostIPC)
}

// plan makes the pod's record, before anything of it exists.
func (r *podRun) plan(id, handler string) error {
	cg, err := r.m.newPodCgroup(id, r.cfg)
	if err != nil {
		return err
	}
	cfgBytes, err := proto.Marshal(r.cfg)
	if err != nil {
		return fmt.Errorf("encode config: %w", err)
	}
	hostname := r.cfg.GetHostname()
	if hostname == "" || r.hostNet {
		if hostname, err = os.Hostname(); err != nil {
			return err
		}
	}
	r.cg = cg
	r.p = &pod{cfg: r.cfg, rec: Record{
		ID: id, Config: cfgBytes, RuntimeHandler: handler, State: StateCreating, CreatedAt: r.start.UnixNano(),
		Dir: r.m.podDir(id), CgroupPath: cg.cg.Path(), Cgroup: cg.cg.SpecPath(), Hostname: hostname,
	}}
	if !r.hostNet {
		r.p.rec.NetNS = r.m.netns.Path(id)
		r.p.rec.Attached = true
	}
	return nil
}

// record writes the record before anything exists: after a crash,
// recovery finds it and undoes whatever part of the pod had been made.
func (r *podRun) record(context.Context) error {
	return r.m.records.Put(r.p.rec.ID, &r.p.rec)
}

// logReady logs the pod ready with the parts of its run worth knowing
// when it is slow: CNI ADD and pause run at the same time.
func (r *podRun) logReady() {
	t := r.run.Time
	r.m.log.Info("pod sandbox ready", "pod", r.p.rec.ID, "name", nameKey(r.cfg.GetMetadata()),
		"ips", r.p.rec.IPs, "pid", r.p.rec.PausePid, "duration", time.Since(r.start),
		"files", t("pod files"), "netns", t("netns")+t("netns adopt"), "cni_add", t("CNI ADD"), "pause", t(pauseStep))
}

const pauseStep = "pause start (CNI ADD beside it)"

// create makes the pod's files, netns, network attachment and pause; CNI
// ADD runs while pause starts. On error the pod is left for undo.
func (r *podRun) create(ctx context.Context) error {
	// Pause is moved into the pod cgroup in a few milliseconds (after the
	// monitor starts): the RCU grace period that move would wait for
	// passes meanwhile.
	cgprime.Prime()
	// In its own user namespace, the pod's network namespace is made by
	// pause (so that the user namespace owns it), then pinned: CNI ADD
	// runs after pause instead of beside it.
	beside, after := !r.hostNet && r.userNS == nil, !r.hostNet && r.userNS != nil
	err := r.run.Run(ctx,
		steps.Step{Name: "pod files", Span: "pod files", Do: r.writeFiles},
		steps.Step{Name: "netns", Span: "netns create", Fault: faultpoint.RunNetNS, Skip: !beside, Do: r.createNetNS},
		steps.Step{Skip: !beside, Do: r.startNetwork},
		steps.Step{Do: r.prepareCgroup},
	)
	if err != nil {
		return err
	}
	pauseErr := r.run.Run(ctx,
		steps.Step{Name: pauseStep, Span: "pause start", Do: r.startPause},
		steps.Step{Span: "netns adopt", Fault: faultpoint.RunNetNS, Skip: !after, Do: r.adoptNetNS},
		steps.Step{Skip: !after, Do: func(ctx context.Context) error { r.setupNetwork(ctx); return nil }},
	)
	return r.run.Run(ctx,
		steps.Step{Fault: faultpoint.RunPauseStarted, Do: func(ctx context.Context) error { return r.joinNetwork(ctx, pauseErr) }},
		steps.Step{Do: r.writeHosts},
		steps.Step{Do: r.ready},
	)
}

func (r *podRun) writeFiles(context.Context) error {
	r.files = podFiles{dir: r.p.rec.Dir}
	if err := r.files.write(r.m.opts.hosts, r.p.rec.Hostname, r.hostNet, r.cfg.GetDnsConfig(), nil); err != nil {
		return err
	}
	if r.hostIPC {
		return nil
	}
	return r.files.mountShm()
}

func (r *podRun) createNetNS(ctx context.Context) error {
	_, err := r.m.netns.Create(ctx, r.p.rec.ID)
	return err
}

// startNetwork runs CNI ADD beside what follows, the netns pinned.
func (r *podRun) startNetwork(ctx context.Context) error {
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		r.setupNetwork(ctx)
	}()
	return nil
}

// setupNetwork runs CNI ADD once the pod's netns is pinned.
func (r *podRun) setupNetwork(ctx context.Context) {
	r.netErr = r.run.Do(ctx, steps.Step{Span: "CNI ADD", Fault: faultpoint.RunCNIAdded, Do: func(ctx context.Context) (err error) {
		r.netRes, err = r.m.net.Setup(ctx, networkPod(&r.p.rec, r.cfg))
		return err
	}})
}

func (r *podRun) prepareCgroup(context.Context) error {
	cgPaths, err := r.cg.Prepare()
	if err != nil {
		r.wg.Wait()
		return errors.Join(err, r.netErr)
	}
	r.pause = &PauseSpec{
		PodID: r.p.rec.ID, NetNS: r.p.rec.NetNS, NewIPC: !r.hostIPC, NewUTS: !r.hostNet, NewPID: !r.hostPID,
		Sysctls: r.cfg.GetLinux().GetSysctls(), Cgroup: r.cg.cg, CgroupPaths: cgPaths, Attach: r.cg.Attach,
		Config: r.cfg, UserNS: r.userNS, HostNetwork: r.hostNet,
	}
	if r.userNS != nil {
		r.pause.NetNS = ""
	}
	if !r.hostNet {
		r.pause.Hostname = r.p.rec.Hostname
	}
	return nil
}

func (r *podRun) startPause(ctx context.Context) (err error) {
	r.proc, err = r.m.pause.Start(ctx, r.pause)
	return err
}

func (r *podRun) adoptNetNS(ctx context.Context) error {
	_, err := r.m.netns.Adopt(ctx, r.p.rec.ID, r.proc.Pid())
	return err
}

// joinNetwork waits for CNI ADD and records pause, whether or not either
// failed.
func (r *podRun) joinNetwork(ctx context.Context, pauseErr error) error {
	reserve.Step(ctx, "CNI ADD")
	r.wg.Wait()
	if r.proc != nil {
		r.p.pause = r.proc
		r.p.rec.PausePid, r.p.rec.PauseStart = r.proc.Pid(), r.proc.StartTime()
	}
	if r.netErr != nil && !errors.Is(r.netErr, network.ErrStillAttached) {
		// Setup already ran DEL: nothing of the attachment is left.
		r.p.rec.Attached = false
	}
	return errors.Join(r.netErr, pauseErr)
}

func (r *podRun) writeHosts(context.Context) error {
	if r.netRes == nil {
		return nil
	}
	for _, ip := range r.netRes.IPs {
		r.p.rec.IPs = append(r.p.rec.IPs, ip.String())
	}
	return writeFile(r.files.Hosts(), hostsContent(r.p.rec.Hostname, net.ParseIP(r.p.rec.IPs[0])))
}

func (r *podRun) ready(context.Context) error {
	r.p.rec.State = StateReady
	if err := r.m.records.Put(r.p.rec.ID, &r.p.rec); err != nil {
		return err
	}
	go r.m.watch(r.p, r.proc)
	return nil
}

// undoTimeout bounds the undo of a failed RunPodSandbox, which runs on
// when the call's own time is up: a CNI DEL has two minutes (stop.go).
const undoTimeout = 3 * time.Minute

// fail undoes a RunPodSandbox that failed with err. A pod whose undo fails
// (a CNI DEL that fails, say) is kept, not ready, as recovery keeps one
// after a crash: listed, the kubelet stops and removes it, and each stop
// retries the release; forgotten, its IP lease would leak, one more with
// every retry of the kubelet. Its name stays taken (reserve.Kept) until
// it is removed. The caller holds p.op if pause is watched.
func (m *Manager) fail(ctx context.Context, p *pod, cg *podCgroup, err error) error {
	id := p.rec.ID
	uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), undoTimeout)
	defer cancel()
	uerr := steps.Name("pod", id, m.undo(uctx, p, cg))
	if uerr == nil {
		return err
	}
	rec := p.update(func(r *Record) { r.State, r.PausePid, r.PauseStart = StateNotReady, 0, 0 })
	if perr := m.records.Put(id, &rec); perr != nil {
		m.log.Error("persist pod state", "pod", id, "error", perr)
	}
	m.add(p)
	m.log.Warn("failed RunPodSandbox not undone: pod kept, not ready, for StopPodSandbox and RemovePodSandbox to release", "pod", id, "error", uerr)
	return reserve.Kept(fmt.Errorf("%w; its undo failed, so the pod is kept, not ready, until it is stopped and removed: %w", err, uerr))
}

// undo releases whatever a failed Run made, the record last. If the
// release fails it stops there: what it could not release stays named by the
// record, for a stop and remove (or the next recovery) to retry. The caller
// names the pod in the error.
func (m *Manager) undo(ctx context.Context, p *pod, cg *podCgroup) error {
	id := p.rec.ID
	// First, as a failed start or a crash may have left a pause whose pid
	// never reached the record.
	var errs []error
	if err := cg.KillAll(ctx); err != nil {
		m.log.Warn("undo RunPodSandbox: step failed", "pod", id, "step", "kill processes", "error", err)
		errs = append(errs, fmt.Errorf("kill processes: %w", err))
	}
	if err := m.release(ctx, p); err != nil {
		m.log.Warn("undo RunPodSandbox: step failed", "pod", id, "step", "release", "error", err)
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	m.opts.Faults.Hit(faultpoint.RecoverPodReleased, id)
	if err := m.purge(ctx, p, cg); err != nil {
		m.log.Warn("undo RunPodSandbox: step failed", "pod", id, "step", "purge", "error", err)
		return err
	}
	return nil
}

func (m *Manager) podDir(id string) string { return m.dir + "/" + id }
