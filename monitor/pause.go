package monitor

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
)

// OpRunPause starts the pod's built-in pause process as a child of the
// monitor (Request.Pause). Once started, pause is addressed like a
// container whose id is the pod's id: OpStatus, OpWait and OpSignal work
// on it, and its exit is recorded in PauseRequest.Dir.
const OpRunPause = "run-pause"

// PauseRequest starts the built-in pause: no image, no libcontainer, a
// plain clone into new namespaces from a thread that joined the pod's
// network namespace.
type PauseRequest struct {
	// Args and Env run pause. The monitor gives it a sync pipe as fd 3, on
	// which pause writes "ok" (or the error) once it is set up, then EOF.
	Args []string `json:"args"`
	Env  []string `json:"env,omitempty"`
	// NetNS is the pinned network namespace pause is born in; empty keeps
	// the monitor's (the host's).
	NetNS string `json:"netns,omitempty"`
	// New namespaces pause is cloned into.
	NewIPC bool `json:"newIpc,omitempty"`
	NewUTS bool `json:"newUts,omitempty"`
	NewPID bool `json:"newPid,omitempty"`
	// UserNS, when set, clones pause into a new user namespace with these
	// mappings, and into a new network namespace too (NetNS is then
	// empty): every namespace of the pod is owned by its user namespace,
	// so that the pod's root may administer them. Berth pins the network
	// namespace from pause afterwards.
	UserNS *UserNS `json:"userns,omitempty"`
	// HostNetwork, with UserNS, keeps pause in the host's network
	// namespace (a hostNetwork pod in its own user namespace): it gets
	// no network namespace of its own.
	HostNetwork bool `json:"hostNetwork,omitempty"`
	// Cgroup is the pod's cgroup as an OCI cgroupsPath in the monitor's
	// driver's form, and CgroupPaths its directories by hierarchy, as
	// berth prepared it: the monitor moves pause in (with systemd, starts
	// its scope with it) before pause reports ready.
	Cgroup      string            `json:"cgroup,omitempty"`
	CgroupPaths map[string]string `json:"cgroupPaths,omitempty"`
	// Dir receives ExitFile when pause exits.
	Dir string `json:"dir"`
}

// UserNS is a user namespace's single uid and gid mappings.
type UserNS struct {
	UIDs []IDMap `json:"uids"`
	GIDs []IDMap `json:"gids"`
}

// IDMap maps Size ids from ContainerID inside to HostID outside.
type IDMap struct {
	ContainerID uint32 `json:"containerId"`
	HostID      uint32 `json:"hostId"`
	Size        uint32 `json:"size"`
}

// CloneIntoUserNS makes cmd (not started) clone its process into a new
// user namespace with u's mappings, and, with newNet, into a new network
// namespace that user namespace owns; groups may be set in it, as containers joining it
// need. The program is executed through an open file, passed as the
// child's next free fd after cmd.ExtraFiles: as root of the new namespace
// the child could not search a host directory closed to others (a 0700
// temp dir). The caller closes the returned file once cmd has started.
func CloneIntoUserNS(cmd *exec.Cmd, u *UserNS, newNet bool) (*os.File, error) {
	if u == nil || len(u.UIDs) == 0 || len(u.GIDs) == 0 {
		return nil, errors.New("user namespace without uid or gid mappings")
	}
	exe, err := os.Open(cmd.Path)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", cmd.Path, err)
	}
	cmd.ExtraFiles = append(cmd.ExtraFiles, exe)
	cmd.Path = fmt.Sprintf("/proc/self/fd/%d", 2+len(cmd.ExtraFiles))
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	attr := cmd.SysProcAttr
	attr.Cloneflags |= syscall.CLONE_NEWUSER
	if newNet {
		attr.Cloneflags |= syscall.CLONE_NEWNET
	}
	for _, m := range u.UIDs {
		attr.UidMappings = append(attr.UidMappings, syscall.SysProcIDMap{ContainerID: int(m.ContainerID), HostID: int(m.HostID), Size: int(m.Size)})
	}
	for _, m := range u.GIDs {
		attr.GidMappings = append(attr.GidMappings, syscall.SysProcIDMap{ContainerID: int(m.ContainerID), HostID: int(m.HostID), Size: int(m.Size)})
	}
	attr.GidMappingsEnableSetgroups = true
	// Cloned, it is still the host's root, whom the new namespace does
	// not map: it becomes the namespace's root (and holds its
	// capabilities) by setting its ids there.
	attr.Credential = &syscall.Credential{Uid: 0, Gid: 0}
	return exe, nil
}

// PrepareUserNS is CloneIntoUserNS as a pause launch's Prepare step
// (PauseLaunch): its cleanup closes the program's file once
// pause has started.
func PrepareUserNS(u *UserNS, newNet bool) func(*exec.Cmd) (func(), error) {
	return func(cmd *exec.Cmd) (func(), error) {
		exe, err := CloneIntoUserNS(cmd, u, newNet)
		if err != nil {
			return nil, err
		}
		return func() { exe.Close() }, nil
	}
}
