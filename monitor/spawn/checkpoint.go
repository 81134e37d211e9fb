package spawn

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/opencontainers/runc/libcontainer"

	"github.com/berth-runtime/berth/monitor"
)

// checkpoint dumps the container's process tree with CRIU (through
// libcontainer, which runs "criu swrk") and leaves it running, as the
// kubelet's checkpoint API wants: a forensic copy, the container goes on.
//
// The container's stdio are pipes whose other ends the pod's process
// holds. CRIU dumps a pipe whose peer is outside the dumped tree as an
// external pipe; libcontainer writes the descriptors' names (from
// state.json, recorded at start) to descriptors.json beside the images,
// which is what a restore needs to hand new pipes in their place.
func checkpoint(r *monitor.SpawnRequest) *monitor.SpawnResult {
	fail := func(err error) *monitor.SpawnResult {
		return &monitor.SpawnResult{Error: fmt.Sprintf("container %s: checkpoint: %v", r.ID, err)}
	}
	if r.ImagesDir == "" || r.WorkDir == "" {
		return fail(errors.New("no images or work directory"))
	}
	c, err := libcontainer.Load(r.Root, r.ID)
	if err != nil {
		return fail(err)
	}
	st, err := c.Status()
	if err != nil {
		return fail(err)
	}
	// Paused: a pod checkpoint freezes all its containers first; CRIU
	// finds the cgroup frozen and leaves it so.
	if st != libcontainer.Running && st != libcontainer.Paused {
		return fail(fmt.Errorf("container is %s, not running", st))
	}
	if err := c.Checkpoint(dumpOptions(r)); err != nil {
		return fail(err)
	}
	// CRIU's post-dump notification marks the state dir as checkpointed,
	// which is for a container that a dump stopped; this one runs on.
	if err := os.Remove(filepath.Join(r.Root, r.ID, "checkpoint")); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fail(err)
	}
	return &monitor.SpawnResult{}
}

// dumpOptions are CRIU's options for the checkpoint r asks for: left
// running, and established TCP connections dumped where r says so (a
// pod's checkpoint: both ends of a connection between two of its
// containers are in it).
func dumpOptions(r *monitor.SpawnRequest) *libcontainer.CriuOpts {
	return &libcontainer.CriuOpts{
		ImagesDirectory: r.ImagesDir,
		WorkDirectory:   r.WorkDir,
		LeaveRunning:    true,
		TcpEstablished:  r.TCPEstablished,
	}
}

// freeze freezes (SpawnPause) or thaws (SpawnResume) the container's
// cgroup through libcontainer, which knows the driver and the version.
func freeze(r *monitor.SpawnRequest) *monitor.SpawnResult {
	fail := func(err error) *monitor.SpawnResult {
		return &monitor.SpawnResult{Error: fmt.Sprintf("container %s: %s: %v", r.ID, r.Op, err)}
	}
	c, err := libcontainer.Load(r.Root, r.ID)
	if err != nil {
		return fail(err)
	}
	if r.Op == monitor.SpawnPause {
		err = c.Pause()
	} else {
		err = c.Resume()
	}
	if err != nil {
		return fail(err)
	}
	return &monitor.SpawnResult{}
}
