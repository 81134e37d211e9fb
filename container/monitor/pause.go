package monitor

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
	// CgroupDirs are the pod cgroup's directories, one per hierarchy: the
	// monitor moves pause into each before pause reports ready.
	CgroupDirs []string `json:"cgroupDirs,omitempty"`
	// Dir receives ExitFile when pause exits.
	Dir string `json:"dir"`
}
