package container

import (
	"context"
	"errors"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/berth-runtime/berth/internal/procstate"
	"github.com/berth-runtime/berth/monitor"
	"github.com/berth-runtime/berth/monitor/pods"
)

// monitorAnswerTimeout bounds each call to a monitor while berth starts:
// one monitor that does not answer must not keep the whole node's runtime
// from serving. A monitor answers in milliseconds; this is for a loaded
// machine.
const monitorAnswerTimeout = 5 * time.Second

// load rebuilds the index from the records of a previous run, without
// asking any pod's process yet: the sandbox service adopts those first,
// and may meanwhile stop or remove the containers of a pod it undoes.
func (s *Service) load() error {
	recs, corrupt, err := s.records.LoadAll()
	if err != nil {
		return err
	}
	// Ids of records of another format version (a newer berth's): their
	// layers, state dirs and image leases are not orphans.
	foreign := map[string]bool{}
	for _, c := range corrupt {
		if c.Kept {
			s.log.Warn("container record of another format version: left as it is, the container not served", "container", c.ID, "path", c.Path, "error", c.Err)
			foreign[c.ID] = true
			continue
		}
		s.log.Error("unreadable container record moved aside", "container", c.ID, "path", c.Path, "error", c.Err)
	}
	// Interrupted creates and live containers, by pod: each pod's are
	// handled by one worker, pods side by side, so that a wedged monitor
	// costs its own pod's timeouts, not the whole node's.
	interrupted := map[string][]*Record{}
	for id, rec := range recs {
		if rec.State == StateCreating && rec.Sandbox {
			// A pod's infra container, cut off in RunPodSandbox: the
			// pod's recovery undoes the pod, whose RemovePod releases
			// it once the pod's processes are gone. Before that its
			// cgroup, the pod's, is busy.
			cfg, _ := decodeConfig(rec.Config)
			c := &ctr{rec: *rec, cfg: cfg, exited: make(chan struct{})}
			close(c.exited)
			s.ctrs[id] = c
			continue
		}
		if rec.State == StateCreating {
			interrupted[rec.PodID] = append(interrupted[rec.PodID], rec)
			continue
		}
		cfg, err := decodeConfig(rec.Config)
		if err != nil {
			s.log.Error("undecodable container config", "container", id, "error", err)
			continue
		}
		c := &ctr{rec: *rec, cfg: cfg, resources: decodeResources(rec.Resources), exited: make(chan struct{})}
		c.spec, _ = os.ReadFile(filepath.Join(rec.Dir, monitor.SpecFile))
		if err := restrictContainerDir(rec.Dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
			s.log.Warn("restrict container dir", "container", id, "error", err)
		}
		if rec.State == StateExited {
			close(c.exited)
		}
		s.ctrs[id] = c
		s.names.Restore(nameKey(rec.PodID, cfg.GetMetadata()), id)
	}
	s.loaded = &loaded{interrupted: interrupted, foreign: foreign}
	return nil
}

// loaded is what load found for recover to reconcile.
type loaded struct {
	interrupted map[string][]*Record // creates berth died inside, by pod
	foreign     map[string]bool      // records of another format version
}

// recover reconciles what load found with what still exists, through
// the pods' processes: exits recorded while berth was down are picked up,
// running containers are watched again, a container whose pod's process
// is gone is ended, and a create berth died inside is undone.
func (s *Service) recover(ctx context.Context) {
	l := s.loaded
	s.loaded = nil
	if l == nil {
		return
	}
	interrupted, foreign := l.interrupted, l.foreign
	live := map[string][]*ctr{}
	s.mu.RLock()
	for _, c := range s.ctrs {
		if !c.isExited() {
			live[c.rec.PodID] = append(live[c.rec.PodID], c)
		}
	}
	s.mu.RUnlock()
	podIDs := maps.Clone(interrupted)
	for podID := range live {
		podIDs[podID] = nil
	}
	var wg sync.WaitGroup
	slots := make(chan struct{}, recoverParallel)
	for podID := range podIDs {
		wg.Add(1)
		slots <- struct{}{}
		go func() {
			defer func() { <-slots; wg.Done() }()
			mon := s.podProc(podID)
			s.undoInterrupted(ctx, mon, interrupted[podID])
			s.reattach(ctx, mon, podID, live[podID])
		}()
	}
	wg.Wait()
	s.collectOrphans(foreign)
}

// recoverParallel bounds the pods whose containers recovery handles at
// once: enough that a few wedged monitors (5 s each) do not add up, few
// enough not to flood a node of hundreds of pods with monitor calls.
const recoverParallel = 16

// undoInterrupted undoes the containers of one pod whose create berth
// died inside. The monitor may already hold one, its init waiting for a
// start that will never come, and refuses to delete a live one.
func (s *Service) undoInterrupted(ctx context.Context, mon pods.Client, recs []*Record) {
	for _, rec := range recs {
		id := rec.ID
		s.log.Info("removing container whose create was interrupted", "container", id)
		// As a failed create is undone (undoCreate): the monitor may
		// still be making it for the berth that died.
		uctx, cancel := context.WithTimeout(ctx, 3*monitorAnswerTimeout)
		if err := s.undoCreate(uctx, mon, rec, nil); err != nil {
			s.log.Error("undo interrupted create", "container", id, "error", err)
		}
		cancel()
	}
}

// reattach picks up the exits one pod's monitor recorded while berth was
// away and watches its running containers again. A monitor that does not
// answer in time is asked nothing more: its containers stay as recorded.
func (s *Service) reattach(ctx context.Context, mon pods.Client, podID string, ctrs []*ctr) {
	// Its process stayed silent for the pod's adoption a moment ago:
	// waiting for it once more would only double the pod's delay.
	silent := s.opts.PodProcesses.Silent(podID)
	if silent && len(ctrs) > 0 {
		s.log.Warn("pod monitor does not answer (silent at the pod's adoption): its containers as recorded", "pod", podID, "containers", len(ctrs))
	}
	for _, c := range ctrs {
		rec := c.snapshot()
		if e, err := monitor.ReadExit(rec.Dir); err == nil && e != nil {
			s.setExit(c, e, "")
			continue
		}
		if silent {
			if !restorePending(&rec) {
				go s.watch(c, mon)
			}
			continue
		}
		sctx, cancel := context.WithTimeout(ctx, monitorAnswerTimeout)
		resp, err := mon.Status(sctx, rec.ID)
		cancel()
		switch {
		case errors.Is(err, context.DeadlineExceeded):
			// Alive but not answering (stopped, wedged): the record
			// stands, and the watcher learns the rest when it answers.
			s.log.Warn("pod monitor does not answer: container state as recorded", "container", rec.ID, "pod", rec.PodID, "after", monitorAnswerTimeout)
			silent = true
		case restorePending(&rec) && monitor.IsCode(err, monitor.CodeNotFound):
			// Made from a checkpoint, not restored yet: the pod's
			// process learns of it at its start.
			continue
		case errors.Is(err, monitor.ErrUnreachable) || monitor.IsCode(err, monitor.CodeNotFound):
			s.monitorGone(c)
			continue
		case err == nil && resp.State == monitor.StateRunning && rec.State == StateCreated:
			// Started (or restored), but berth died before recording it.
			c.mu.Lock()
			c.rec.State = StateRunning
			if c.rec.Pid == 0 {
				c.rec.Pid, c.rec.PidStart = resp.Pid, procstate.StartTime(resp.Pid)
			}
			c.mu.Unlock()
		}
		go s.watch(c, mon)
	}
}

// collectOrphans removes writable layers and state dirs no record names:
// after a reboot the records (on tmpfs) are gone, the layers are not.
func (s *Service) collectOrphans(foreign map[string]bool) {
	for _, parent := range []string{s.upper, s.dir} {
		entries, err := os.ReadDir(parent)
		if err != nil {
			continue
		}
		for _, e := range entries {
			if _, known := s.ctrs[e.Name()]; known || foreign[e.Name()] {
				continue
			}
			p := filepath.Join(parent, e.Name())
			if err := unmountContainerDir(p); err != nil {
				s.log.Warn("unmount orphan container dir", "path", p, "error", err)
				continue
			}
			s.log.Info("removing container leftovers", "path", p)
			os.RemoveAll(p)
		}
	}
	known := maps.Clone(foreign)
	for id := range s.ctrs {
		known[id] = true
	}
	for _, h := range s.opts.Images.Holders() {
		if id := holderContainer(h); !known[id] && isContainerID(id) {
			s.log.Info("releasing image lease of a container that is gone", "container", id, "holder", h)
			s.opts.Images.Release(context.Background(), h)
		}
	}
}

func isContainerID(s string) bool {
	if len(s) != 64 {
		return false
	}
	for _, c := range s {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
