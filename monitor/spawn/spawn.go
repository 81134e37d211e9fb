// Package spawn is the monitor's short-lived helper (binary berth-spawn):
// one libcontainer call per run, on behalf of the pod's monitor, which
// links no libcontainer itself (the protocol is in package monitor,
// spawnproto.go). A create or exec leaves its process running and exits
// once the monitor holds it: the monitor, a child subreaper, inherits the
// process when the helper exits; a restore (restore.go) likewise, its
// process restored by CRIU and running. berth runs it too, for a
// checkpoint (checkpoint.go), which starts no process.
package spawn

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/opencontainers/runc/libcontainer"
	"github.com/opencontainers/runc/libcontainer/configs"
	"github.com/opencontainers/runc/libcontainer/specconv"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/berth-runtime/berth/internal/cgroup"
	"github.com/berth-runtime/berth/internal/faultpoint"
	"github.com/berth-runtime/berth/monitor"
)

// Fault points of the helper, for crash tests (internal/faultpoint).
const (
	PointCreated  = "spawn-created"  // the container made, its init not started
	PointStarted  = "spawn-started"  // the process runs, not yet reported
	PointReported = "spawn-reported" // reported, before the monitor's ack
)

// Main runs one request from the helper's descriptors and returns the
// exit code.
func Main(fault *faultpoint.Point) int {
	result := os.NewFile(monitor.SpawnResultFD, "result")
	ack := os.NewFile(monitor.SpawnAckFD, "ack")
	if result == nil || ack == nil {
		fmt.Fprintln(os.Stderr, "berth-spawn: run by the pod's monitor only")
		return 2
	}
	req := &monitor.SpawnRequest{}
	data, err := io.ReadAll(io.LimitReader(os.Stdin, 4<<20))
	if err == nil {
		err = json.Unmarshal(data, req)
	}
	var res *monitor.SpawnResult
	if err != nil {
		res = &monitor.SpawnResult{Error: "berth-spawn: bad request: " + err.Error()}
	} else {
		res = run(req, fault)
	}
	result.Write(encodeResult(req.Format, res))
	result.Close()
	if res.Error != "" {
		return 1
	}
	if res.Pid > 0 {
		fault.Hit(PointReported, req.ID)
	}
	// Until the monitor holds the process: as our unreaped child its pid
	// cannot be reused meanwhile. EOF when the monitor closes its end,
	// or dies.
	io.Copy(io.Discard, ack)
	return 0
}

// encodeResult is the result in the request's format.
func encodeResult(format string, res *monitor.SpawnResult) []byte {
	if format != monitor.SpawnFormatLines {
		out, _ := json.Marshal(res)
		return out
	}
	if res.Error != "" {
		return []byte("error " + strings.Join(strings.Fields(res.Error), " ") + "\n")
	}
	var b strings.Builder
	if res.Pid > 0 {
		fmt.Fprintf(&b, "pid %d\n", res.Pid)
	}
	// cgroup v1's memory hierarchy, or v2's unified one.
	for _, k := range []string{"memory", ""} {
		if d, ok := res.Cgroups[k]; ok && !strings.ContainsAny(d, "\n") {
			fmt.Fprintf(&b, "memcg %s\n", d)
			break
		}
	}
	if res.Plain {
		b.WriteString("plain\n")
		for _, d := range res.Cgroups {
			if !strings.ContainsAny(d, "\n") {
				fmt.Fprintf(&b, "cgroup %s\n", d)
			}
		}
	}
	b.WriteString("ok\n")
	return []byte(b.String())
}

func run(r *monitor.SpawnRequest, fault *faultpoint.Point) *monitor.SpawnResult {
	fail := func(err error) *monitor.SpawnResult {
		return &monitor.SpawnResult{Error: fmt.Sprintf("container %s: %v", r.ID, err)}
	}
	if r.Root == "" || r.ID == "" {
		return fail(errors.New("no state root or id"))
	}
	switch r.Op {
	case monitor.SpawnJoin:
		return join(r)
	case monitor.SpawnDestroy:
		c, err := libcontainer.Load(r.Root, r.ID)
		if errors.Is(err, libcontainer.ErrNotExist) {
			// Made, but its init never started (no state written yet):
			// no process and no cgroup, only the dir a next create with
			// this id would trip over.
			if err := os.RemoveAll(filepath.Join(r.Root, r.ID)); err != nil {
				return fail(err)
			}
			return &monitor.SpawnResult{}
		}
		if err != nil {
			return fail(err)
		}
		// Kills what the process left in its cgroup, so that the pipes
		// they hold reach EOF, and removes the cgroup and the state.
		if err := c.Destroy(); err != nil {
			return fail(fmt.Errorf("destroy: %w", err))
		}
		return &monitor.SpawnResult{}
	case monitor.SpawnCheckpoint:
		return checkpoint(r)
	case monitor.SpawnPause, monitor.SpawnResume:
		return freeze(r)
	}
	spec := r.Spec
	if spec == nil {
		var err error
		if spec, err = monitor.ReadSpec(r.Dir); err != nil {
			return fail(err)
		}
	}
	if r.Resources != nil {
		res := &specs.LinuxResources{}
		if err := json.Unmarshal(r.Resources, res); err != nil {
			return fail(fmt.Errorf("update: resources: %w", err))
		}
		if spec.Linux == nil {
			spec.Linux = &specs.Linux{}
		}
		spec.Linux.Resources = res
	}
	switch r.Op {
	case monitor.SpawnCreate:
		return create(r, spec, fault)
	case monitor.SpawnExec:
		return execute(r, spec, fault)
	case monitor.SpawnRestore:
		return restore(r, spec, fault)
	case monitor.SpawnUpdate:
		c, err := libcontainer.Load(r.Root, r.ID)
		if err != nil {
			return fail(err)
		}
		nc, err := libcontainerConfig(r, spec)
		if err != nil {
			return fail(fmt.Errorf("update: %w", err))
		}
		cfg := c.Config()
		cfg.Cgroups.Resources = nc.Cgroups.Resources
		if err := c.Set(cfg); err != nil {
			return fail(fmt.Errorf("update: %w", err))
		}
		return &monitor.SpawnResult{}
	}
	return fail(fmt.Errorf("unknown operation %q", r.Op))
}

// join moves r.Pid into r.Cgroup with the monitor's driver.
func join(r *monitor.SpawnRequest) *monitor.SpawnResult {
	driver := cgroup.Cgroupfs
	if r.Systemd {
		driver = cgroup.Systemd
	}
	cg, err := driver.FromSpec(r.Cgroup)
	if err == nil {
		var mgr *cgroup.Manager
		if mgr, err = cg.Manager(r.CgroupPaths); err == nil {
			err = mgr.Join(r.Pid)
		}
	}
	if err != nil {
		return &monitor.SpawnResult{Error: fmt.Sprintf("pod %s: %v", r.ID, err)}
	}
	return &monitor.SpawnResult{}
}

// libcontainerConfig is libcontainer's view of a spec. With systemd, its
// cgroupsPath is slice:prefix:name and the container's cgroup is a scope
// libcontainer has systemd make (and stop, and set) over D-Bus.
func libcontainerConfig(r *monitor.SpawnRequest, s *specs.Spec) (*configs.Config, error) {
	return specconv.CreateLibcontainerConfig(&specconv.CreateOpts{CgroupName: r.ID, Spec: s, UseSystemdCgroup: r.Systemd})
}

// process is a process as the spec's runs: same user, groups,
// environment and working directory.
func process(s *specs.Process, args []string) *libcontainer.Process {
	groups := make([]int, 0, len(s.User.AdditionalGids))
	for _, g := range s.User.AdditionalGids {
		groups = append(groups, int(g))
	}
	return &libcontainer.Process{
		Args: args, Env: s.Env, Cwd: s.Cwd,
		UID: int(s.User.UID), GID: int(s.User.GID), AdditionalGroups: groups,
		AppArmorProfile: s.ApparmorProfile,
	}
}

// stdio hands the process the descriptors the monitor passed.
func stdio(r *monitor.SpawnRequest, p *libcontainer.Process) {
	fd := uintptr(monitor.SpawnStdioFD)
	next := func(name string) *os.File {
		f := os.NewFile(fd, name)
		fd++
		return f
	}
	if r.TTY {
		p.ConsoleSocket = next("console")
		p.ConsoleWidth, p.ConsoleHeight = r.Width, r.Height
		return
	}
	if r.Stdin {
		p.Stdin = next("stdin")
	}
	if r.Stdout {
		p.Stdout = next("stdout")
	}
	if r.Stderr {
		p.Stderr = next("stderr")
	}
}

// newContainer makes the libcontainer container of r and its init
// process, with r's stdio, not yet started: what create starts and
// restore restores.
func newContainer(r *monitor.SpawnRequest, spec *specs.Spec, fault *faultpoint.Point) (*libcontainer.Container, *libcontainer.Process, error) {
	cfg, err := libcontainerConfig(r, spec)
	if err != nil {
		return nil, nil, fmt.Errorf("libcontainer config: %w", err)
	}
	if cfg.Rlimits, err = rlimits(spec.Process); err != nil {
		return nil, nil, err
	}
	c, err := libcontainer.Create(r.Root, r.ID, cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("create: %w", err)
	}
	fault.Hit(PointCreated, r.ID)
	p := process(spec.Process, spec.Process.Args)
	p.Init = true
	stdio(r, p)
	return c, p, nil
}

func create(r *monitor.SpawnRequest, spec *specs.Spec, fault *faultpoint.Point) *monitor.SpawnResult {
	fail := func(err error) *monitor.SpawnResult {
		return &monitor.SpawnResult{Error: fmt.Sprintf("container %s: %v", r.ID, err)}
	}
	c, p, err := newContainer(r, spec, fault)
	if err != nil {
		return fail(err)
	}
	if err := c.Start(p); err != nil {
		// A failed start leaves a state dir that would block the next
		// create with this id.
		c.Destroy()
		return fail(fmt.Errorf("start init: %w", err))
	}
	pid, err := p.Pid()
	if err != nil {
		c.Destroy()
		return fail(err)
	}
	res := &monitor.SpawnResult{Pid: pid, Plain: plainDestroy(r, spec)}
	if st, err := c.State(); err == nil {
		res.Cgroups = st.CgroupPaths
	}
	fault.Hit(PointStarted, r.ID)
	return res
}

// plainDestroy tells whether destroying the container once it exited is
// only removing directories: it had a PID namespace of its own (the
// kernel killed whatever was left when its init died), no poststop hook
// is to run, no Intel RDT group is to remove, and its cgroups are
// cgroupfs directories, no systemd unit.
func plainDestroy(r *monitor.SpawnRequest, s *specs.Spec) bool {
	if r.Systemd || s.Linux == nil || s.Linux.IntelRdt != nil || (s.Hooks != nil && len(s.Hooks.Poststop) > 0) {
		return false
	}
	for _, ns := range s.Linux.Namespaces {
		if ns.Type == specs.PIDNamespace {
			return ns.Path == ""
		}
	}
	return false
}

func execute(r *monitor.SpawnRequest, spec *specs.Spec, fault *faultpoint.Point) *monitor.SpawnResult {
	fail := func(err error) *monitor.SpawnResult {
		return &monitor.SpawnResult{Error: fmt.Sprintf("container %s: %v", r.ID, err)}
	}
	if len(r.Args) == 0 {
		return fail(errors.New("exec: no command"))
	}
	c, err := libcontainer.Load(r.Root, r.ID)
	if err != nil {
		return fail(err)
	}
	p := process(spec.Process, r.Args)
	stdio(r, p)
	if err := c.Run(p); err != nil {
		return fail(fmt.Errorf("exec %q: %w", r.Args[0], err))
	}
	pid, err := p.Pid()
	if err != nil {
		p.Signal(os.Kill)
		return fail(err)
	}
	fault.Hit(PointStarted, r.ID)
	return &monitor.SpawnResult{Pid: pid}
}
