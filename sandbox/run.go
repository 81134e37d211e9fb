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
	start := time.Now()
	// On the call's span: the server learns the id only once Run returns.
	trace.SpanFromContext(ctx).SetAttributes(tracing.PodID.String(id))
	hostNet, hostPID, hostIPC := namespaces(cfg)
	if userNamespace(cfg) != nil && (hostPID || hostIPC) {
		return fmt.Errorf("pod %s: %w: a pod in its own user namespace cannot share the node's PID or IPC namespace", id, ErrInvalid)
	}
	if err := checkSysctls(cfg.GetLinux().GetSysctls(), hostNet, hostIPC); err != nil {
		return fmt.Errorf("pod %s: %w", id, err)
	}
	cg, err := m.newPodCgroup(id, cfg)
	if err != nil {
		return fmt.Errorf("pod %s: %w", id, err)
	}
	cfgBytes, err := proto.Marshal(cfg)
	if err != nil {
		return fmt.Errorf("pod %s: encode config: %w", id, err)
	}
	hostname := cfg.GetHostname()
	if hostname == "" || hostNet {
		if hostname, err = os.Hostname(); err != nil {
			return fmt.Errorf("pod %s: %w", id, err)
		}
	}
	p := &pod{cfg: cfg, rec: Record{
		ID:             id,
		Config:         cfgBytes,
		RuntimeHandler: handler,
		State:          StateCreating,
		CreatedAt:      start.UnixNano(),
		Dir:            m.podDir(id),
		CgroupPath:     cg.cg.Path(),
		Cgroup:         cg.cg.SpecPath(),
		Hostname:       hostname,
	}}
	if !hostNet {
		p.rec.NetNS = m.netns.Path(id)
		p.rec.Attached = true
	}
	reserve.Step(ctx, "record")
	// Written before anything exists: after a crash, recovery finds this
	// record and undoes whatever part of the pod had been made.
	if err := m.records.Put(id, &p.rec); err != nil {
		return fmt.Errorf("pod %s: %w", id, err)
	}
	m.opts.Faults.Hit(faultpoint.RunRecorded, id)
	var steps stepTimes
	if err := m.create(ctx, p, cg, hostNet, hostPID, hostIPC, &steps); err != nil {
		return m.fail(ctx, p, cg, err)
	}
	// Plugins see the pod before anyone else does: not listed, and no
	// container can be created in it, until they have answered.
	reserve.Step(ctx, "NRI RunPodSandbox")
	nctx, unblock := m.opts.NRI.BlockSync(ctx)
	defer unblock()
	if err := m.nriRun(nctx, p); err != nil {
		// Pause runs and is watched: the watcher must not see its stop as
		// a death.
		p.op.Lock("RunPodSandbox")
		defer p.op.Unlock()
		return m.fail(ctx, p, cg, fmt.Errorf("pod %s: %w", id, err))
	}
	m.add(p)
	m.publishStarted(id)
	m.opts.Faults.Hit(faultpoint.RunReady, id)
	m.log.Info("pod sandbox ready", "pod", id, "name", nameKey(cfg.GetMetadata()),
		"ips", p.rec.IPs, "pid", p.rec.PausePid, "duration", time.Since(start),
		"files", steps.files, "netns", steps.netns, "cni_add", steps.cni, "pause", steps.pause)
	return nil
}

// stepTimes are the parts of a RunPodSandbox worth knowing when it is
// slow (logged with it): CNI ADD and pause run at the same time.
type stepTimes struct {
	files, netns, cni, pause time.Duration
}

// create makes the pod's files, netns, network attachment and pause; CNI
// ADD runs while pause starts. On error the pod is left for undo.
func (m *Manager) create(ctx context.Context, p *pod, cg *podCgroup, hostNet, hostPID, hostIPC bool, steps *stepTimes) error {
	id, cfg := p.rec.ID, p.cfg
	// Pause is moved into the pod cgroup in a few milliseconds (after the
	// monitor starts): the RCU grace period that move would wait for
	// passes meanwhile.
	cgprime.Prime()
	t := time.Now()
	reserve.Step(ctx, "pod files")
	_, span := m.opts.Tracer.Start(ctx, "pod files")
	files := podFiles{dir: p.rec.Dir}
	if err := files.write(m.opts.hosts, p.rec.Hostname, hostNet, cfg.GetDnsConfig(), nil); err != nil {
		tracing.End(span, err)
		return fmt.Errorf("pod %s: %w", id, err)
	}
	if !hostIPC {
		if err := files.mountShm(); err != nil {
			tracing.End(span, err)
			return fmt.Errorf("pod %s: %w", id, err)
		}
	}
	span.End()
	var (
		wg     sync.WaitGroup
		netRes *network.Result
		netErr error
	)
	steps.files = time.Since(t)
	// In its own user namespace, the pod's network namespace is made by
	// pause (so that the user namespace owns it), then pinned: CNI ADD
	// runs after pause instead of beside it.
	userNS := userNamespace(cfg)
	// setupNet runs CNI ADD once the pod's netns is pinned.
	setupNet := func() {
		t := time.Now()
		ctx, span := m.opts.Tracer.Start(ctx, "CNI ADD")
		netRes, netErr = m.net.Setup(ctx, networkPod(&p.rec, cfg))
		tracing.End(span, netErr)
		steps.cni = time.Since(t)
		if netErr == nil {
			m.opts.Faults.Hit(faultpoint.RunCNIAdded, id)
		}
	}
	if !hostNet && userNS == nil {
		t = time.Now()
		reserve.Step(ctx, "netns")
		_, span := m.opts.Tracer.Start(ctx, "netns create")
		_, err := m.netns.Create(ctx, id)
		tracing.End(span, err)
		if err != nil {
			return err
		}
		steps.netns = time.Since(t)
		m.opts.Faults.Hit(faultpoint.RunNetNS, id)
		wg.Add(1)
		go func() {
			defer wg.Done()
			setupNet()
		}()
	}
	cgPaths, err := cg.Prepare()
	if err != nil {
		wg.Wait()
		return fmt.Errorf("pod %s: %w", id, errors.Join(err, netErr))
	}
	spec := &PauseSpec{
		PodID:       id,
		NetNS:       p.rec.NetNS,
		NewIPC:      !hostIPC,
		NewUTS:      !hostNet,
		NewPID:      !hostPID,
		Sysctls:     cfg.GetLinux().GetSysctls(),
		Cgroup:      cg.cg,
		CgroupPaths: cgPaths,
		Attach:      cg.Attach,
		Config:      cfg,
		UserNS:      userNS,
		HostNetwork: hostNet,
	}
	if userNS != nil {
		spec.NetNS = ""
	}
	if !hostNet {
		spec.Hostname = p.rec.Hostname
	}
	t = time.Now()
	reserve.Step(ctx, "pause start (CNI ADD beside it)")
	pctx, span := m.opts.Tracer.Start(ctx, "pause start")
	proc, pauseErr := m.pause.Start(pctx, spec)
	tracing.End(span, pauseErr)
	steps.pause = time.Since(t)
	if userNS != nil && !hostNet && pauseErr == nil {
		t = time.Now()
		_, span := m.opts.Tracer.Start(ctx, "netns adopt")
		_, err := m.netns.Adopt(ctx, id, proc.Pid())
		tracing.End(span, err)
		if err != nil {
			pauseErr = fmt.Errorf("pod %s: %w", id, err)
		} else {
			steps.netns = time.Since(t)
			m.opts.Faults.Hit(faultpoint.RunNetNS, id)
			setupNet()
		}
	}
	reserve.Step(ctx, "CNI ADD")
	wg.Wait()
	if proc != nil {
		p.pause = proc
		p.rec.PausePid, p.rec.PauseStart = proc.Pid(), proc.StartTime()
	}
	if netErr != nil && !errors.Is(netErr, network.ErrStillAttached) {
		// Setup already ran DEL: nothing of the attachment is left.
		p.rec.Attached = false
	}
	if err := errors.Join(netErr, pauseErr); err != nil {
		return err
	}
	m.opts.Faults.Hit(faultpoint.RunPauseStarted, id)
	if netRes != nil {
		for _, ip := range netRes.IPs {
			p.rec.IPs = append(p.rec.IPs, ip.String())
		}
		if err := writeFile(files.Hosts(), hostsContent(p.rec.Hostname, net.ParseIP(p.rec.IPs[0]))); err != nil {
			return fmt.Errorf("pod %s: %w", id, err)
		}
	}
	p.rec.State = StateReady
	if err := m.records.Put(id, &p.rec); err != nil {
		return fmt.Errorf("pod %s: %w", id, err)
	}
	go m.watch(p, proc)
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
	uerr := m.undo(uctx, p, cg)
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
// record, for a stop and remove (or the next recovery) to retry.
func (m *Manager) undo(ctx context.Context, p *pod, cg *podCgroup) error {
	id := p.rec.ID
	// First, as a failed start or a crash may have left a pause whose pid
	// never reached the record.
	var errs []error
	if err := cg.KillAll(ctx); err != nil {
		m.log.Warn("undo RunPodSandbox: step failed", "pod", id, "step", "kill processes", "error", err)
		errs = append(errs, fmt.Errorf("pod %s: kill processes: %w", id, err))
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
