package container

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/berth-runtime/berth/monitor"
)

// A pod checkpoint (CheckpointPod, cri-api v0.37): in the directory the
// caller made, one container archive per container, laid out as
// CheckpointContainer writes it (archive.go), and the manifest that names
// them, written last so that a directory with a manifest is whole.
const podManifest = "pod.json"

// podManifestVersion changes when a berth could not read an older
// manifest as it is.
const podManifestVersion = 1

// PodCheckpoint is a pod checkpoint's manifest.
type PodCheckpoint struct {
	Version int `json:"version"`
	// The checkpointed pod, for whoever reads the directory.
	PodID          string                   `json:"podId"`
	Name           string                   `json:"name"`
	Namespace      string                   `json:"namespace"`
	CheckpointedAt time.Time                `json:"checkpointedTime"`
	Containers     []PodCheckpointContainer `json:"containers"`
}

// PodCheckpointContainer is one container of a pod checkpoint.
type PodCheckpointContainer struct {
	// Name is the container's metadata name, by which a restore matches
	// the kubelet's configs.
	Name string `json:"name"`
	ID   string `json:"id"`
	// Archive is the archive's file name in the directory.
	Archive string `json:"archive"`
	// Image is the image's id where the archive has it, else its name.
	Image string `json:"image"`
}

// CheckpointPod writes a checkpoint of the running containers ids of pod
// podID into dir, an existing empty directory: all of them are frozen
// before the first is dumped and thawed after the last, a consistent cut
// of the pod, and thawed whatever happens. On error nothing is left in
// dir. The deadline is ctx's, CheckpointTimeout where it has none.
func (s *Service) CheckpointPod(ctx context.Context, podID, dir string, ids []string) error {
	pod, ctrs, err := s.preparePodCheckpoint(ctx, podID, dir, ids)
	if err != nil {
		return err
	}
	// In id order, so that two checkpoints of one pod cannot deadlock.
	for _, c := range ctrs {
		c.op.Lock()
		defer c.op.Unlock()
	}
	recs, err := runningRecords(ctrs)
	if err != nil {
		return err
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, CheckpointTimeout)
		defer cancel()
	}
	thaw, err := s.freeze(ctx, recs)
	defer thaw()
	if err != nil {
		return fmt.Errorf("pod sandbox %s: checkpoint: %w", pod.ID, err)
	}
	if err := s.writePodCheckpoint(ctx, pod, ctrs, recs, dir); err != nil {
		return fmt.Errorf("pod sandbox %s: %w", pod.ID, errTimedOut(ctx, err))
	}
	s.log.Info("pod checkpointed", "pod", pod.ID, "containers", len(recs), "dir", dir)
	return nil
}

// preparePodCheckpoint checks a pod checkpoint before anything is done:
// the directory, the pod, its containers (podCheckpointSet), CRIU.
func (s *Service) preparePodCheckpoint(ctx context.Context, podID, dir string, ids []string) (*Pod, []*ctr, error) {
	if err := checkPodCheckpointDir(dir); err != nil {
		return nil, nil, err
	}
	pod, err := s.opts.Pods.Pod(ctx, podID)
	if err != nil {
		return nil, nil, err
	}
	if !pod.Ready {
		return nil, nil, fmt.Errorf("%w: pod sandbox %s is not ready", ErrState, pod.ID)
	}
	ctrs, err := s.podCheckpointSet(pod.ID, ids)
	if err != nil {
		return nil, nil, err
	}
	if why := s.criu.unavailable(); why != "" {
		s.log.Warn("pod checkpoint refused: CRIU does not work on this host", "pod", pod.ID, "reason", why)
		return nil, nil, ErrCheckpointUnavailable
	}
	return pod, ctrs, nil
}

// writePodCheckpoint dumps the frozen containers (recs, of ctrs) into
// dir, an archive each, then writes the manifest; on error it removes
// what it wrote. Established TCP connections are dumped
// (tcp-established, as each archive's config.dump records): the
// containers of a pod talk to each other over its loopback, and with
// every one of them in the cut both ends of such a connection are, so
// that it carries on once the pod is restored.
func (s *Service) writePodCheckpoint(ctx context.Context, pod *Pod, ctrs []*ctr, recs []Record, dir string) (err error) {
	var written []string
	defer func() {
		if err != nil {
			removeWritten(written)
		}
	}()
	m := &PodCheckpoint{Version: podManifestVersion, PodID: pod.ID, Name: pod.Config.GetMetadata().GetName(),
		Namespace: pod.Config.GetMetadata().GetNamespace(), CheckpointedAt: time.Now().UTC()}
	for i, rec := range recs {
		entry := PodCheckpointContainer{Name: ctrs[i].cfg.GetMetadata().GetName(), ID: rec.ID, Archive: rec.ID + ".tar", Image: cmp.Or(rec.ImageID, rec.ImageRef)}
		written = append(written, filepath.Join(dir, entry.Archive))
		if err := s.checkpointTo(ctx, ctrs[i], &rec, filepath.Join(dir, entry.Archive), true); err != nil {
			return err
		}
		m.Containers = append(m.Containers, entry)
	}
	written = append(written, filepath.Join(dir, podManifest))
	if err := writePodManifest(dir, m); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	return nil
}

// checkPodCheckpointDir validates CheckpointPod's output_path: the
// absolute path of an existing, empty directory.
func checkPodCheckpointDir(dir string) error {
	switch {
	case dir == "":
		return fmt.Errorf("%w: output_path: required", ErrInvalid)
	case !filepath.IsAbs(dir):
		return fmt.Errorf("%w: output_path: %q is not an absolute path", ErrInvalid, dir)
	}
	entries, err := os.ReadDir(dir)
	switch {
	case err != nil:
		return fmt.Errorf("%w: output_path: %q is not a directory that exists: %w", ErrInvalid, dir, err)
	case len(entries) > 0:
		return fmt.Errorf("%w: output_path: %q is not empty (%s, ...)", ErrInvalid, dir, entries[0].Name())
	}
	return nil
}

// podCheckpointSet looks up the containers of a pod checkpoint, in id
// order: named once each, all of pod podID, running, no two of one name
// (a restore matches containers by name).
func (s *Service) podCheckpointSet(podID string, ids []string) ([]*ctr, error) {
	if len(ids) == 0 {
		return nil, fmt.Errorf("%w: container_ids: empty: name the pod's running containers to checkpoint", ErrInvalid)
	}
	byID, byName := map[string]*ctr{}, map[string]string{}
	for _, id := range ids {
		c, err := s.lookup(id)
		if err != nil {
			return nil, err
		}
		rec := c.snapshot()
		name := c.cfg.GetMetadata().GetName()
		switch {
		case byID[rec.ID] != nil:
			return nil, fmt.Errorf("%w: container_ids: container %s is named twice", ErrInvalid, rec.ID)
		case rec.PodID != podID:
			return nil, fmt.Errorf("%w: container_ids: container %s is of pod sandbox %s, not %s", ErrInvalid, rec.ID, rec.PodID, podID)
		case byName[name] != "":
			return nil, fmt.Errorf("%w: container_ids: containers %s and %s are both named %q: a restore tells containers apart by name", ErrInvalid, byName[name], rec.ID, name)
		case rec.State != StateRunning || c.isExited():
			// Asked again under the op locks: said here before CRIU's
			// absence, as CheckpointContainer does.
			return nil, fmt.Errorf("%w: container %s is not running", ErrState, rec.ID)
		}
		byID[rec.ID], byName[name] = c, rec.ID
	}
	var ctrs []*ctr
	for _, id := range slices.Sorted(maps.Keys(byID)) {
		ctrs = append(ctrs, byID[id])
	}
	return ctrs, nil
}

// runningRecords are the containers' records, each running; the caller
// holds their op locks.
func runningRecords(ctrs []*ctr) ([]Record, error) {
	recs := make([]Record, len(ctrs))
	for i, c := range ctrs {
		recs[i] = c.snapshot()
		if recs[i].State != StateRunning || c.isExited() {
			return nil, fmt.Errorf("%w: container %s is not running", ErrState, recs[i].ID)
		}
	}
	return recs, nil
}

// freeze freezes the containers' cgroups, and returns what thaws those
// it froze: that runs past ctx's end, since the CRI wants no pod left
// frozen whatever became of the call.
func (s *Service) freeze(ctx context.Context, recs []Record) (func(), error) {
	bin, err := s.opts.PodProcesses.SpawnBinary()
	if err != nil {
		return func() {}, err
	}
	var frozen []string
	thaw := func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		for _, id := range frozen {
			if err := monitor.RunSpawn(ctx, bin, &monitor.SpawnRequest{Op: monitor.SpawnResume, Root: s.runc, ID: id}); err != nil {
				s.log.Error("cannot thaw a container after a pod checkpoint", "container", id, "error", err)
			}
		}
	}
	for _, rec := range recs {
		if err := monitor.RunSpawn(ctx, bin, &monitor.SpawnRequest{Op: monitor.SpawnPause, Root: s.runc, ID: rec.ID}); err != nil {
			return thaw, fmt.Errorf("container %s: freeze: %w", rec.ID, errTimedOut(ctx, err))
		}
		frozen = append(frozen, rec.ID)
	}
	return thaw, nil
}

// errTimedOut classes err as a timeout when ctx's deadline passed.
func errTimedOut(ctx context.Context, err error) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) && !errors.Is(err, ErrTimeout) {
		return fmt.Errorf("%w: %w", ErrTimeout, err)
	}
	return err
}

// removeWritten removes what a failed pod checkpoint wrote; the
// directory is the caller's.
func removeWritten(paths []string) {
	for _, p := range paths {
		os.Remove(p)
	}
}

// writePodManifest writes dir's pod.json.
func writePodManifest(dir string, m *PodCheckpoint) error {
	data, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, podManifest), append(data, '\n'), 0o600)
}

// OpenPodCheckpoint reads and checks the pod checkpoint in dir: its
// manifest, and that every archive it names is there (ErrInvalid naming
// what is wrong). dir is not written to.
func OpenPodCheckpoint(dir string) (*PodCheckpoint, error) {
	if !filepath.IsAbs(dir) {
		return nil, fmt.Errorf("%w: checkpoint_path: %q is not an absolute path", ErrInvalid, dir)
	}
	data, err := os.ReadFile(filepath.Join(dir, podManifest))
	if err != nil {
		return nil, fmt.Errorf("%w: checkpoint_path: %q is not a pod checkpoint: %w", ErrInvalid, dir, err)
	}
	m := &PodCheckpoint{}
	if err := json.Unmarshal(data, m); err != nil {
		return nil, fmt.Errorf("%w: checkpoint_path: %s: %w", ErrInvalid, podManifest, err)
	}
	if m.Version != podManifestVersion {
		return nil, fmt.Errorf("%w: checkpoint_path: %s: version %d, this berth reads %d", ErrInvalid, podManifest, m.Version, podManifestVersion)
	}
	if len(m.Containers) == 0 {
		return nil, fmt.Errorf("%w: checkpoint_path: %s: no containers", ErrInvalid, podManifest)
	}
	names := map[string]bool{}
	for _, c := range m.Containers {
		switch {
		case c.Name == "" || names[c.Name]:
			return nil, fmt.Errorf("%w: checkpoint_path: %s: container name %q is empty or not unique", ErrInvalid, podManifest, c.Name)
		case !filepath.IsLocal(c.Archive) || filepath.Base(c.Archive) != c.Archive:
			return nil, fmt.Errorf("%w: checkpoint_path: %s: container %q: archive %q is not a file of the checkpoint's directory", ErrInvalid, podManifest, c.Name, c.Archive)
		}
		names[c.Name] = true
		// Only there: its entries are checked by the create from it,
		// before that container is made; an archive holds the
		// container's memory, and is read once more to be extracted.
		if fi, err := os.Stat(filepath.Join(dir, c.Archive)); err != nil || !fi.Mode().IsRegular() {
			return nil, fmt.Errorf("%w: container %q: archive %s is not a file (%v)", ErrInvalid, c.Name, c.Archive, err)
		}
	}
	return m, nil
}

// CheckRestore answers, before a restore from the pod checkpoint in dir
// makes anything, what each create from its archives would: nil where
// CRIU works on this host, else ErrCheckpointUnavailable (why is
// logged), the answer of CheckpointContainer.
func (s *Service) CheckRestore(dir string) error {
	if why := s.criu.unavailable(); why != "" {
		s.log.Warn("pod restore refused: CRIU does not work on this host", "checkpoint", dir, "reason", why)
		return ErrCheckpointUnavailable
	}
	return nil
}

// Container is the entry of the container named name.
func (p *PodCheckpoint) Container(name string) (PodCheckpointContainer, bool) {
	i := slices.IndexFunc(p.Containers, func(c PodCheckpointContainer) bool { return c.Name == name })
	if i < 0 {
		return PodCheckpointContainer{}, false
	}
	return p.Containers[i], true
}
