// Package cgroup decides where berth's pods and containers get their
// cgroups and who makes them: berth itself, writing the cgroup filesystem
// (the cgroupfs driver), or systemd, asked over D-Bus for transient units
// (the systemd driver), as runc's two drivers do. It is the one place that
// knows the difference: the rest of berth holds a Parent or a Cgroup and
// asks it for paths and managers (opencontainers/cgroups', which make a
// systemd scope with its first process, set unit properties and stop and
// reset the unit on removal).
package cgroup

import (
	"context"
	"errors"
	"fmt"
	"path"
	"strings"
	"time"

	sdbus "github.com/coreos/go-systemd/v22/dbus"
	"github.com/opencontainers/cgroups"
	"github.com/opencontainers/cgroups/manager"
	"github.com/opencontainers/cgroups/systemd"
)

// Driver is a cgroup driver, as the kubelet and the config name it.
type Driver string

// The drivers.
const (
	Cgroupfs Driver = "cgroupfs"
	Systemd  Driver = "systemd"
)

// ScopePrefix starts the name of every systemd scope berth makes:
// berth-<id>.scope, the name the kubelet and cAdvisor look for.
const ScopePrefix = "berth"

// ParseDriver reads a driver's name; empty is cgroupfs.
func ParseDriver(name string) (Driver, error) {
	switch d := Driver(name); d {
	case "":
		return Cgroupfs, nil
	case Cgroupfs, Systemd:
		return d, nil
	}
	return "", fmt.Errorf("unknown cgroup driver %q (cgroupfs or systemd)", name)
}

func (d Driver) orDefault() Driver {
	if d == "" {
		return Cgroupfs
	}
	return d
}

// UseSystemd tells libcontainer (specconv.CreateOpts.UseSystemdCgroup)
// which driver reads the specs' cgroupsPath.
func (d Driver) UseSystemd() bool { return d == Systemd }

// DefaultParent holds the cgroups of pods that name no parent (crictl's):
// /berth, or the slice berth.slice, which systemd makes on first use.
func (d Driver) DefaultParent() string {
	if d == Systemd {
		return ScopePrefix + ".slice"
	}
	return "/" + ScopePrefix
}

// checkTimeout bounds Check's D-Bus round trip.
const checkTimeout = 10 * time.Second

// Check tells whether the driver works on this host: for systemd, that
// systemd is the init and answers on D-Bus (the system bus, or as root
// systemd's private socket). Berth checks once at start, so that a node
// without systemd fails the daemon with one clear message rather than
// every pod.
func (d Driver) Check(ctx context.Context) error {
	if d != Systemd {
		return nil
	}
	if !systemd.IsRunningSystemd() {
		return errors.New("cgroup driver systemd: systemd is not running on this host (no /run/systemd/system): use cgroup_driver = \"cgroupfs\"")
	}
	ctx, cancel := context.WithTimeout(ctx, checkTimeout)
	defer cancel()
	conn, err := sdbus.NewWithContext(ctx)
	if err != nil {
		return fmt.Errorf("cgroup driver systemd: systemd does not answer on D-Bus (system bus or /run/systemd/private): %w", err)
	}
	defer conn.Close()
	if _, err := conn.GetManagerProperty("Version"); err != nil {
		return fmt.Errorf("cgroup driver systemd: ask systemd its version over D-Bus: %w", err)
	}
	return nil
}

// Parent is the parent of a pod's cgroups, as the kubelet names it in
// linux.cgroup_parent: a cgroupfs path (/kubepods/burstable/pod<uid>) or a
// systemd slice (kubepods-burstable-pod<uid>.slice). The zero Parent is
// the cgroupfs driver's default.
type Parent struct {
	driver Driver
	name   string
}

// Parent checks a pod's cgroup parent against the driver; empty is
// DefaultParent.
func (d Driver) Parent(name string) (Parent, error) {
	d = d.orDefault()
	if name == "" {
		name = d.DefaultParent()
	}
	if d == Systemd {
		slice := name
		if strings.Contains(name, "/") {
			// The kubelet sends the slice's path (its CgroupName.ToSystemd,
			// /kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid>.slice);
			// the slice is its last element, as containerd and CRI-O take it.
			slice = path.Base(name)
			if slice == "/" {
				slice = "-.slice"
			}
		}
		if strings.Contains(slice, ":") {
			return Parent{}, fmt.Errorf("cgroup parent %q: not a systemd slice name", name)
		}
		dir, err := systemd.ExpandSlice(slice)
		if err != nil {
			return Parent{}, fmt.Errorf("cgroup parent %q: the systemd driver needs a slice (name.slice): %w", name, err)
		}
		if slice != name && path.Clean(name) != dir {
			return Parent{}, fmt.Errorf("cgroup parent %q: not the path of slice %s (%s)", name, slice, dir)
		}
		return Parent{driver: d, name: slice}, nil
	}
	if !path.IsAbs(name) {
		return Parent{}, fmt.Errorf("cgroup parent %q: the cgroupfs driver needs an absolute path", name)
	}
	if clean := path.Clean(name); clean != name && clean+"/" != name {
		return Parent{}, fmt.Errorf("cgroup parent %q is not a clean path", name)
	}
	return Parent{driver: d, name: path.Clean(name)}, nil
}

func (p Parent) orDefault() Parent {
	p.driver = p.driver.orDefault()
	if p.name == "" {
		p.name = p.driver.DefaultParent()
	}
	return p
}

// Driver is the driver that makes p's children.
func (p Parent) Driver() Driver { return p.orDefault().driver }

// Name is p as the kubelet wrote it: a path or a slice name.
func (p Parent) Name() string { return p.orDefault().name }

// Path is p's cgroup relative to the root of each hierarchy.
func (p Parent) Path() string {
	p = p.orDefault()
	if p.driver == Systemd {
		dir, _ := systemd.ExpandSlice(p.name) // checked by Driver.Parent
		return dir
	}
	return p.name
}

// Child is the cgroup of pause (named by its pod's id) or of a container
// under p: <parent>/<id>, or the scope berth-<id>.scope in the slice.
func (p Parent) Child(id string) Cgroup {
	return Cgroup{parent: p.orDefault(), prefix: ScopePrefix, name: id}
}

// Manager manages p itself, to set its resources (the pod's, in
// UpdatePodSandboxResources): with systemd through its slice unit's
// properties, as the kubelet does. The parent is the kubelet's: berth
// never makes or removes it.
func (p Parent) Manager() (cgroups.Manager, error) {
	p = p.orDefault()
	c := &cgroups.Cgroup{Resources: &cgroups.Resources{}}
	if p.driver == Systemd {
		up, err := parentSlice(p.name)
		if err != nil {
			return nil, err
		}
		c.Systemd, c.Name, c.Parent = true, p.name, up
	} else {
		c.Path = p.name
	}
	m, err := manager.New(c)
	if err != nil {
		return nil, fmt.Errorf("cgroup %s: %w", p.name, err)
	}
	return m, nil
}

// parentSlice is the slice a slice lives in: a-b-c.slice is in a-b.slice,
// a.slice in the root slice.
func parentSlice(slice string) (string, error) {
	name := strings.TrimSuffix(slice, ".slice")
	if name == "-" {
		return "", fmt.Errorf("cgroup %s: the root slice is no pod's own", slice)
	}
	i := strings.LastIndex(name, "-")
	if i < 0 {
		return "-.slice", nil
	}
	return name[:i] + ".slice", nil
}

// Cgroup is the cgroup of one process tree berth starts (a pod's pause, a
// container): a directory under its parent with cgroupfs, a transient
// scope in the parent slice with systemd.
type Cgroup struct {
	parent       Parent
	prefix, name string // systemd: unit prefix-name.scope (name, if a slice)
}

// Parent is the parent c is made under.
func (c Cgroup) Parent() Parent { return c.parent }

// unit is c's systemd unit, as libcontainer names it.
func (c Cgroup) unit() string {
	if strings.HasSuffix(c.name, ".slice") {
		return c.name
	}
	return c.prefix + "-" + c.name + ".scope"
}

// SpecPath is c as an OCI spec's linux.cgroupsPath, in the form runc's
// driver of the same name reads: /kubepods/pod1/<id>, or
// kubepods-pod1.slice:berth:<id>.
func (c Cgroup) SpecPath() string {
	if c.parent.Driver() == Systemd {
		return c.parent.Name() + ":" + c.prefix + ":" + c.name
	}
	return path.Join(c.parent.Name(), c.name)
}

// Path is c relative to the root of each hierarchy: where its files are
// read (stats) and where the kubelet looks for it.
func (c Cgroup) Path() string {
	if c.parent.Driver() == Systemd {
		return path.Join(c.parent.Path(), c.unit())
	}
	return path.Join(c.parent.Name(), c.name)
}

// FromSpec reads back an OCI cgroupsPath written for this driver (by
// SpecPath, or changed by an NRI plugin), as libcontainer reads it.
func (d Driver) FromSpec(specPath string) (Cgroup, error) {
	if d.orDefault() == Systemd {
		parts := strings.Split(specPath, ":")
		if len(parts) != 3 || parts[2] == "" {
			return Cgroup{}, fmt.Errorf("cgroups path %q: the systemd driver needs slice:prefix:name", specPath)
		}
		slice := parts[0]
		if slice == "" {
			slice = "system.slice" // libcontainer's default
		}
		p, err := d.Parent(slice)
		if err != nil {
			return Cgroup{}, err
		}
		return Cgroup{parent: p, prefix: parts[1], name: parts[2]}, nil
	}
	clean := path.Clean("/" + specPath)
	if clean == "/" {
		return Cgroup{}, fmt.Errorf("cgroups path %q names no cgroup", specPath)
	}
	return Cgroup{parent: Parent{driver: Cgroupfs, name: path.Dir(clean)}, prefix: ScopePrefix, name: path.Base(clean)}, nil
}

func (c Cgroup) config() *cgroups.Cgroup {
	cg := &cgroups.Cgroup{Resources: &cgroups.Resources{}}
	if c.parent.Driver() == Systemd {
		cg.Systemd, cg.Parent, cg.ScopePrefix, cg.Name = true, c.parent.Name(), c.prefix, c.name
	} else {
		cg.Path = c.Path()
	}
	return cg
}

// Manager is a cgroups.Manager of one Cgroup, with the two steps that
// put a new process in, which differ by driver.
type Manager struct {
	cgroups.Manager
	c Cgroup
}

// Manager manages c. paths, as an earlier manager of c returned them
// (GetPaths), spare the lookup of every hierarchy's mount; nil finds them.
func (c Cgroup) Manager(paths map[string]string) (*Manager, error) {
	m, err := manager.NewWithPaths(c.config(), paths)
	if err != nil {
		return nil, fmt.Errorf("cgroup %s: %w", c.Path(), err)
	}
	return &Manager{Manager: m, c: c}, nil
}

// Prepare makes what can be made of the cgroup before its first process
// exists, and returns its directories by hierarchy (for a Manager of it
// elsewhere, which then joins a process without looking them up). With
// cgroupfs that is every directory, made while other work of a pod's
// start goes on; systemd makes a scope only with its first process, so
// nothing is made yet.
func (m *Manager) Prepare() (map[string]string, error) {
	if m.c.parent.Driver() != Systemd {
		if err := m.Apply(-1); err != nil {
			return nil, fmt.Errorf("create cgroup %s: %w", m.c.Path(), err)
		}
	}
	return m.GetPaths(), nil
}

// Join moves pid into the cgroup: with cgroupfs it is written into each
// directory; with systemd the scope is started with it (and, on cgroup
// v1, it is written into the hierarchies systemd does not manage).
func (m *Manager) Join(pid int) error {
	if err := m.Apply(pid); err != nil {
		return fmt.Errorf("join cgroup %s: %w", m.c.Path(), err)
	}
	return nil
}

// Remove removes a cgroup libcontainer made, from what its state recorded
// (its config and paths), once its processes are gone: as libcontainer's
// own destroy would, stopping and resetting a systemd unit, then removing
// the directories.
func Remove(c *cgroups.Cgroup, paths map[string]string) error {
	if c == nil {
		return cgroups.RemovePaths(paths)
	}
	if c.Resources == nil {
		c.Resources = &cgroups.Resources{}
	}
	m, err := manager.NewWithPaths(c, paths)
	if err != nil {
		return err
	}
	return m.Destroy()
}
