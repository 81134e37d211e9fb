package monitor

import specs "github.com/opencontainers/runtime-spec/specs-go"

// The spawn helper (package monitor/spawn, binary berth-spawn) does what
// needs libcontainer for the monitor, one call per run: it creates a
// container or starts an exec process, reports the process and exits
// once the monitor has it. The monitor is a child subreaper, so the
// process, the helper's child, becomes the monitor's when the helper
// exits; the long-lived monitor so carries no libcontainer and no cgo.
//
// The helper's descriptors: 0 the request (JSON, then EOF), 1 nothing,
// 2 the monitor's log, SpawnResultFD the result (JSON, then EOF),
// SpawnAckFD closed by the monitor once it holds the process (a pidfd),
// and from SpawnStdioFD on the process's stdio: stdin, stdout, stderr,
// those the request asks for, in that order, or the console socket alone
// with TTY.

// SpawnBinary is the helper's executable, installed next to the monitor.
const SpawnBinary = "berth-spawn"

// The helper's descriptors.
const (
	SpawnResultFD = 3
	SpawnAckFD    = 4
	SpawnStdioFD  = 5
)

// Spawn operations.
const (
	SpawnCreate  = "create"  // the container, blocked before its process runs
	SpawnExec    = "exec"    // a process in the running container
	SpawnUpdate  = "update"  // the container's cgroup resources
	SpawnDestroy = "destroy" // what is left of an exited container
	// SpawnJoin moves a process (Pid: pause) into a cgroup (Cgroup, an
	// OCI cgroupsPath, and CgroupPaths, its directories) through the
	// cgroup driver: with systemd, a scope started over D-Bus.
	SpawnJoin = "join"
	// SpawnCheckpoint dumps the running container's processes with CRIU
	// into ImagesDir (CRIU's log in WorkDir), leaving them running. berth
	// runs it itself, not the pod's process: nothing of the pod's
	// process takes part in it, and its result is a directory.
	SpawnCheckpoint = "checkpoint"
	// SpawnRestore creates the container of Dir's spec with its process
	// tree restored by CRIU from Dir's RestoreDir (a checkpoint archive,
	// extracted) instead of started: running when the helper answers,
	// with the stdio asked for in place of the checkpointed process's.
	SpawnRestore = "restore"
	// SpawnPause and SpawnResume freeze and thaw the container's cgroup,
	// for a pod checkpoint: every container of the cut is frozen before
	// the first is dumped, and thawed after the last.
	SpawnPause  = "pause"
	SpawnResume = "resume"
)

// RestoreDir, in a container's dir, holds the checkpoint archive a
// SpawnRestore restores from, extracted (CRI-O's layout: CRIU's images
// in its "checkpoint" directory), and CRIU's restore.log.
const RestoreDir = "restore"

// RestoreOptionsFile, in RestoreDir, holds the RestoreOptions berth
// wrote for a SpawnRestore from what the archive says of its dump; a
// RestoreDir without one is restored with none.
const RestoreOptionsFile = "restore-options.json"

// RestoreOptions are the CRIU options a restore needs because the dump
// was made with them.
type RestoreOptions struct {
	// TCPEstablished: the dump holds established TCP connections, which
	// CRIU restores only when asked (tcp-established).
	TCPEstablished bool `json:"tcpEstablished,omitempty"`
}

// SpawnRequest is one helper run.
type SpawnRequest struct {
	Op string `json:"op"`
	// Root is libcontainer's state root, ID the container's.
	Root string `json:"root"`
	ID   string `json:"id"`
	// Dir holds the spec (SpecFile).
	Dir     string `json:"dir,omitempty"`
	Systemd bool   `json:"systemd,omitempty"`
	// Args are an exec's command; it runs as the spec's process does.
	Args   []string `json:"args,omitempty"`
	Stdin  bool     `json:"stdin,omitempty"`
	Stdout bool     `json:"stdout,omitempty"`
	Stderr bool     `json:"stderr,omitempty"`
	TTY    bool     `json:"tty,omitempty"`
	Width  uint16   `json:"width,omitempty"`
	Height uint16   `json:"height,omitempty"`
	// Spec replaces Dir's spec (update: the spec with the new resources).
	Spec *specs.Spec `json:"spec,omitempty"`
	// Pid, Cgroup and CgroupPaths: SpawnJoin's process and cgroup.
	Pid         int               `json:"pid,omitempty"`
	Cgroup      string            `json:"cgroup,omitempty"`
	CgroupPaths map[string]string `json:"cgroupPaths,omitempty"`
	// Resources (update) replace the spec's resources: the OCI
	// LinuxResources as JSON, merged by berth. The C pod process passes
	// them on without parsing them (base64 in this JSON).
	Resources []byte `json:"resources,omitempty"`
	// ImagesDir and WorkDir: SpawnCheckpoint's CRIU image directory
	// (made by the helper) and the existing directory for its log.
	ImagesDir string `json:"imagesDir,omitempty"`
	WorkDir   string `json:"workDir,omitempty"`
	// TCPEstablished: SpawnCheckpoint dumps established TCP connections
	// (CRIU's tcp-established) instead of failing on them. A restore of
	// such a dump needs the option too: RestoreOptionsFile says so.
	TCPEstablished bool `json:"tcpEstablished,omitempty"`
	// Format is the result's: JSON (SpawnResult) by default, or
	// SpawnFormatLines for the C pod process, which parses no JSON.
	Format string `json:"format,omitempty"`
}

// SpawnFormatLines is the result as lines, each a key, a space and a
// value: "pid N" (a create's or exec's process), "memcg DIR" (the
// container's memory cgroup, whose oom_kill counter tells an OOM kill),
// "plain" then "cgroup DIR" for each of its cgroups (Plain),
// "error TEXT" (on one line), and "ok" last on success. A result without
// "ok" or "error" is a helper that died before it answered.
const SpawnFormatLines = "lines"

// SpawnResult is the helper's answer.
type SpawnResult struct {
	Error string `json:"error,omitempty"`
	Pid   int    `json:"pid,omitempty"`
	// Cgroups are the container's cgroup directories by hierarchy.
	Cgroups map[string]string `json:"cgroups,omitempty"`
	// Plain (create): destroying the container once it exits is only
	// removing Cgroups and its state dir (monitord's plainDestroy: a PID
	// namespace of its own, no poststop hook, no Intel RDT, cgroupfs).
	Plain bool `json:"plain,omitempty"`
}
