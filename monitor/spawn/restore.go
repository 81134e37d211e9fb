package spawn

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/opencontainers/runc/libcontainer"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/berth-runtime/berth/internal/faultpoint"
	"github.com/berth-runtime/berth/monitor"
)

// restore makes the container of the spec and has CRIU restore the
// checkpointed process tree into it, in place of a new init. The process
// runs when this returns; with libcontainer's "restore sibling" it is
// this helper's child, so it becomes the pod process's (a child
// subreaper) once the helper exits, as a created init does.
//
// The namespaces the spec joins by path (the new pod's network, IPC and
// UTS namespaces) are joined, not restored: libcontainer dumped the
// network namespace as external and passes the new one in its place. The
// checkpointed stdio pipes (descriptors.json) are replaced by the stdio
// the pod process passed, so the output goes to its log pipes.
func restore(r *monitor.SpawnRequest, spec *specs.Spec, fault *faultpoint.Point) *monitor.SpawnResult {
	fail := func(err error) *monitor.SpawnResult {
		return &monitor.SpawnResult{Error: fmt.Sprintf("container %s: restore: %v", r.ID, err)}
	}
	if r.Dir == "" || r.TTY {
		return fail(fmt.Errorf("no container dir, or a terminal (a restore has pipes only)"))
	}
	opts, err := restoreOptions(filepath.Join(r.Dir, monitor.RestoreDir))
	if err != nil {
		return fail(err)
	}
	c, p, err := newContainer(r, spec, fault)
	if err != nil {
		return fail(err)
	}
	if err := c.Restore(p, opts); err != nil {
		// What CRIU restored so far is killed with the cgroup, and the
		// state dir would block a retry.
		c.Destroy()
		return fail(err)
	}
	pid, err := p.Pid()
	if err != nil {
		c.Destroy()
		return fail(err)
	}
	// A pod checkpoint froze the container before CRIU dumped it, and
	// CRIU may bring the freezer's state back with the cgroup: a restored
	// container runs.
	if st, err := c.Status(); err == nil && st == libcontainer.Paused {
		if err := c.Resume(); err != nil {
			c.Destroy()
			return fail(fmt.Errorf("thaw: %w", err))
		}
	}
	res := &monitor.SpawnResult{Pid: pid, Plain: plainDestroy(r, spec)}
	if st, err := c.State(); err == nil {
		res.Cgroups = st.CgroupPaths
	}
	fault.Hit(PointStarted, r.ID)
	return res
}

// restoreOptions are CRIU's options for a restore from work (a
// monitor.RestoreDir): its images, and what the dump was made with
// (monitor.RestoreOptionsFile; none where it is absent). CRIU restores
// established TCP connections only when asked, as it dumps them.
func restoreOptions(work string) (*libcontainer.CriuOpts, error) {
	opts := &libcontainer.CriuOpts{ImagesDirectory: filepath.Join(work, "checkpoint"), WorkDirectory: work}
	data, err := os.ReadFile(filepath.Join(work, monitor.RestoreOptionsFile))
	if errors.Is(err, os.ErrNotExist) {
		return opts, nil
	}
	if err != nil {
		return nil, err
	}
	var ro monitor.RestoreOptions
	if err := json.Unmarshal(data, &ro); err != nil {
		return nil, fmt.Errorf("%s: %w", monitor.RestoreOptionsFile, err)
	}
	opts.TcpEstablished = ro.TCPEstablished
	return opts, nil
}
