package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/monitor"
	"github.com/berth-runtime/berth/network"
)

// watch marks the pod not ready when its pause exits on its own.
func (m *Manager) watch(p *pod, proc *Process) {
	<-proc.Done()
	if !proc.Exited() {
		return // handle closed: berth is shutting down or stopping it
	}
	p.op.Lock("the pause watcher")
	defer p.op.Unlock()
	p.mu.Lock()
	if p.removed || p.pause != proc || p.rec.State != StateReady {
		p.mu.Unlock()
		return
	}
	p.pause = nil
	p.rec.State, p.rec.PausePid, p.rec.PauseStart = StateNotReady, 0, 0
	rec := p.rec
	p.mu.Unlock()
	proc.Close()
	m.log.Warn("pause exited: pod sandbox not ready", "pod", rec.ID)
	if err := m.records.Put(rec.ID, &rec); err != nil {
		m.log.Error("persist pod state", "pod", rec.ID, "error", err)
	}
	m.publish(runtimeapi.ContainerEventType_CONTAINER_STOPPED_EVENT, rec.ID)
}

// recover rebuilds the index from the records and reconciles it with the
// host: pods whose pause died while berth was away become not ready; a pod
// a crash left half-made is undone; netns pins, pod directories and CNI
// attachments that no pod owns are released. Each cleanup is logged.
func (m *Manager) recover(ctx context.Context) error {
	recs, corrupt, err := m.records.LoadAll()
	if err != nil {
		return fmt.Errorf("sandbox: load records: %w", err)
	}
	ours := map[string]bool{}
	for _, c := range corrupt {
		if c.Kept {
			// A newer berth's pod: what it holds is left alone, and
			// not taken for an orphan.
			m.log.Warn("pod record of another format version: left as it is, the pod not served", "pod", c.ID, "path", c.Path, "error", c.Err)
			m.foreign[c.ID] = true
			ours[c.ID] = true
			continue
		}
		m.log.Error("unreadable pod record moved aside", "pod", c.ID, "path", c.Path, "error", c.Err)
	}
	for id := range recs {
		ours[id] = true
	}
	pins, _ := m.netns.List()
	for _, id := range pins {
		ours[id] = true
	}
	awaitStalePlugins(ours, m.log)
	// Pods side by side, a bounded number at once: one whose monitor is
	// wedged costs its own timeout, not one per pod in a row.
	type recovered struct {
		p    *pod
		keep bool
	}
	out := make(map[string]recovered, len(recs))
	var (
		wg    sync.WaitGroup
		outMu sync.Mutex
	)
	slots := make(chan struct{}, recoverParallel)
	for id, rec := range recs {
		wg.Add(1)
		slots <- struct{}{}
		go func() {
			defer func() { <-slots; wg.Done() }()
			p, keep := m.recoverPod(ctx, id, rec)
			outMu.Lock()
			out[id] = recovered{p, keep}
			outMu.Unlock()
		}()
	}
	wg.Wait()
	for id, r := range out {
		if !r.keep {
			continue
		}
		p, cfg := r.p, r.p.cfg
		m.add(p)
		m.names.Restore(nameKey(cfg.GetMetadata()), id)
	}
	m.cleanOrphans(ctx)
	return nil
}

// recoverParallel bounds the pods recovery handles at once.
const recoverParallel = 16

// recoverPod reconciles one pod's record with the host: a half-made pod is
// undone, a live one's pause adopted. keep says whether the pod is still
// there to be served.
func (m *Manager) recoverPod(ctx context.Context, id string, rec *Record) (p *pod, keep bool) {
	p = &pod{rec: *rec}
	cfg, err := decodeConfig(rec.Config)
	if err != nil {
		m.log.Error("pod record with unreadable config: cleaning up", "pod", id, "error", err)
		p.rec.State = StateCreating
		cfg = nil
	}
	p.cfg = cfg
	if p.rec.State != StateCreating {
		m.adoptPause(ctx, p)
		return p, true
	}
	if m.undoCrashed(ctx, p) || cfg == nil {
		return p, false
	}
	// Not undone (a CNI DEL failed, say): kept, not ready, so that the
	// kubelet sees it and its stop and remove retry the cleanup;
	// forgotten, its IP would stay leased until the next restart. Undo
	// went on past the failed step and dropped the pod: it is back.
	p.pause, p.removed = nil, false
	p.rec.State, p.rec.PausePid, p.rec.PauseStart = StateNotReady, 0, 0
	if err := m.records.Put(id, &p.rec); err != nil {
		m.log.Error("persist pod state", "pod", id, "error", err)
	}
	return p, true
}

// undoCrashed releases a pod whose RunPodSandbox never finished, and
// reports whether all of it is gone.
func (m *Manager) undoCrashed(ctx context.Context, p *pod) bool {
	id := p.rec.ID
	if p.rec.PausePid != 0 {
		if proc, err := OpenProcess(p.rec.PausePid, p.rec.PauseStart, nil); err == nil {
			p.pause = proc
		}
	}
	cg, err := m.openPodCgroup(&p.rec, p.cfg)
	if err != nil {
		m.log.Error("half-made pod: bad cgroup path", "pod", id, "error", err)
		return false
	}
	if err := m.undo(ctx, p, cg); err != nil {
		m.log.Error("clean up half-made pod: kept, not ready, for the kubelet to remove", "pod", id, "error", err)
		return false
	}
	m.log.Warn("cleaned up pod left half-made by a crash", "pod", id)
	return true
}

// adoptTimeout bounds adopting one pod's pause while berth starts: one
// pod's monitor that does not answer must not keep the node's runtime
// from serving.
const adoptTimeout = 5 * time.Second

// adoptPause re-attaches to a pod's pause through its runtime, or records
// its death.
func (m *Manager) adoptPause(ctx context.Context, p *pod) {
	if p.rec.PausePid == 0 {
		return
	}
	actx, cancel := context.WithTimeout(ctx, adoptTimeout)
	proc, err := m.pause.Adopt(actx, p.rec.ID, p.rec.PausePid, p.rec.PauseStart)
	cancel()
	if err == nil {
		p.pause = proc
		go m.watch(p, proc)
		return
	}
	if errors.Is(err, monitor.ErrVersion) {
		// The monitor runs, in a protocol version this berth does not
		// serve: the pod is kept as recorded and reported, its pause
		// watched directly; calls that need the monitor fail naming the
		// versions.
		if proc, perr := OpenProcess(p.rec.PausePid, p.rec.PauseStart, nil); perr == nil {
			m.log.Error("pod monitor speaks a protocol this berth cannot serve: pod kept as recorded, pause watched directly", "pod", p.rec.ID, "pid", p.rec.PausePid, "error", err)
			p.pause = proc
			go m.watch(p, proc)
			return
		}
	}
	if errors.Is(err, context.DeadlineExceeded) {
		// The pod's runtime (its monitor) does not answer, but pause may
		// well run: watched directly, the pod stays as recorded.
		if proc, perr := OpenProcess(p.rec.PausePid, p.rec.PauseStart, nil); perr == nil {
			m.log.Warn("pause's runtime does not answer: pause watched directly", "pod", p.rec.ID, "pid", p.rec.PausePid, "after", adoptTimeout)
			p.pause = proc
			go m.watch(p, proc)
			return
		}
	}
	if !errors.Is(err, ErrProcessGone) {
		m.log.Error("adopt pause", "pod", p.rec.ID, "pid", p.rec.PausePid, "error", err)
	}
	if p.rec.State == StateReady {
		m.log.Warn("pause died while berth was away: pod sandbox not ready", "pod", p.rec.ID, "pid", p.rec.PausePid)
	}
	p.rec.State, p.rec.PausePid, p.rec.PauseStart = StateNotReady, 0, 0
	if err := m.records.Put(p.rec.ID, &p.rec); err != nil {
		m.log.Error("persist pod state", "pod", p.rec.ID, "error", err)
	}
}

// cleanOrphans releases netns pins, pod directories and CNI attachments
// of pods berth has no record of.
func (m *Manager) cleanOrphans(ctx context.Context) {
	m.mu.RLock()
	known := make(map[string]bool, len(m.pods))
	attached := map[string]bool{}
	for id := range m.foreign {
		// Its record cannot say whether it is attached: assume so.
		known[id], attached[id] = true, true
	}
	for id, p := range m.pods {
		known[id] = true
		if p.rec.Attached {
			attached[id] = true
		}
	}
	m.mu.RUnlock()

	pins, err := m.netns.List()
	if err != nil {
		m.log.Error("list netns pins", "error", err)
	}
	for _, id := range pins {
		if known[id] {
			continue
		}
		path := m.netns.Path(id)
		// DEL first, while the interfaces can still be found in the netns.
		if err := m.net.Teardown(ctx, &network.Pod{ID: id, NetNS: path}); err != nil {
			m.log.Error("detach orphaned netns", "pod", id, "error", err)
		}
		if err := m.netns.Remove(ctx, path); err != nil {
			m.log.Error("remove orphaned netns pin", "pod", id, "error", err)
			continue
		}
		m.log.Warn("removed netns pin no pod owns", "pod", id, "path", path)
	}

	entries, err := os.ReadDir(m.dir)
	if err != nil {
		m.log.Error("list pod dirs", "error", err)
	}
	for _, e := range entries {
		if !e.IsDir() || known[e.Name()] {
			continue
		}
		if err := (podFiles{dir: filepath.Join(m.dir, e.Name())}).remove(); err != nil {
			m.log.Error("remove orphaned pod dir", "pod", e.Name(), "error", err)
			continue
		}
		m.log.Warn("removed pod dir no pod owns", "pod", e.Name())
	}

	gone, err := m.net.GC(ctx, attached)
	for _, id := range gone {
		m.log.Warn("released CNI attachment no pod owns", "pod", id)
	}
	if err != nil {
		m.log.Error("CNI garbage collection", "error", err)
	}
}
