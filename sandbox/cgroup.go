package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"

	"github.com/opencontainers/cgroups"
	"github.com/opencontainers/cgroups/fs"
	"github.com/opencontainers/cgroups/fs2"
)

// Cgroup drivers, as the kubelet names them.
const (
	DriverCgroupfs = "cgroupfs"
	DriverSystemd  = "systemd"
)

// podCgroupPath is the cgroup (relative to each hierarchy's root) that
// pause runs in: a child of the parent the kubelet gives. With the systemd
// driver the parent is a slice name, which is translated to the path
// systemd would have made for it, so the pod lands where the kubelet
// looks for it even though berth writes cgroupfs itself.
func podCgroupPath(driver, parent, defaultParent, id string) (string, error) {
	if parent == "" {
		parent = defaultParent
	}
	switch driver {
	case DriverCgroupfs, "":
		if !path.IsAbs(parent) {
			return "", fmt.Errorf("cgroup parent %q: cgroupfs driver needs an absolute path", parent)
		}
		clean := path.Clean(parent)
		if clean != parent && clean+"/" != parent {
			return "", fmt.Errorf("cgroup parent %q is not a clean path", parent)
		}
		return path.Join(clean, id), nil
	case DriverSystemd:
		dir, err := expandSlice(parent)
		if err != nil {
			return "", err
		}
		return path.Join(dir, "berth-"+id+".scope"), nil
	default:
		return "", fmt.Errorf("unknown cgroup driver %q", driver)
	}
}

// expandSlice turns a systemd slice name into its cgroup path: every
// dash-separated prefix is a parent slice, so "a-b-c.slice" lives at
// /a.slice/a-b.slice/a-b-c.slice; "-.slice" is the root.
func expandSlice(slice string) (string, error) {
	name, ok := strings.CutSuffix(slice, ".slice")
	if !ok || strings.Contains(slice, "/") {
		return "", fmt.Errorf("cgroup parent %q is not a systemd slice (name.slice)", slice)
	}
	if name == "-" {
		return "/", nil
	}
	if name == "" || strings.HasPrefix(name, "-") || strings.HasSuffix(name, "-") || strings.Contains(name, "--") {
		return "", fmt.Errorf("cgroup parent %q is not a valid slice name", slice)
	}
	p := "/"
	prefix := ""
	for _, part := range strings.Split(name, "-") {
		prefix += part
		p = path.Join(p, prefix+".slice")
		prefix += "-"
	}
	return p, nil
}

// podCgroup is pause's cgroup in every hierarchy: each v1 controller, the
// named ones and, on a hybrid host, the unified one.
type podCgroup struct {
	path string
	mgr  cgroups.Manager
}

func newPodCgroup(p string) (*podCgroup, error) {
	cg := &cgroups.Cgroup{Path: p, Resources: &cgroups.Resources{}}
	var mgr cgroups.Manager
	var err error
	if cgroups.IsCgroup2UnifiedMode() {
		mgr, err = fs2.NewManager(cg, filepath.Join("/sys/fs/cgroup", p))
	} else {
		mgr, err = fs.NewManager(cg, nil)
	}
	if err != nil {
		return nil, fmt.Errorf("cgroup %s: %w", p, err)
	}
	return &podCgroup{path: p, mgr: mgr}, nil
}

// Create makes the cgroup in every hierarchy and returns its directories.
func (c *podCgroup) Create() ([]string, error) {
	if err := c.mgr.Apply(-1); err != nil {
		return nil, fmt.Errorf("create cgroup %s: %w", c.path, err)
	}
	var dirs []string
	for _, d := range c.mgr.GetPaths() {
		dirs = append(dirs, d)
	}
	sort.Strings(dirs)
	return dirs, nil
}

// Attach creates the cgroup in every hierarchy and moves pid into it.
func (c *podCgroup) Attach(pid int) error {
	if err := c.mgr.Apply(pid); err != nil {
		return fmt.Errorf("join cgroup %s: %w", c.path, err)
	}
	return nil
}

// KillAll SIGKILLs whatever still runs in the cgroup and waits for it to
// exit: what a crash in the middle of RunPodSandbox can leave behind.
func (c *podCgroup) KillAll(ctx context.Context) error {
	// Every hierarchy is asked: a crash may have come between joining
	// one controller and the next.
	pids := map[int]bool{}
	for _, dir := range c.mgr.GetPaths() {
		list, err := cgroups.GetAllPids(dir)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("list cgroup %s: %w", c.path, err)
		}
		for _, pid := range list {
			pids[pid] = true
		}
	}
	var errs []error
	for pid := range pids {
		p, err := OpenProcess(pid, 0, nil)
		if err != nil {
			continue // already gone
		}
		if err := p.Stop(ctx, 0); err != nil {
			errs = append(errs, err)
		}
		p.Close()
	}
	return errors.Join(errs...)
}

// Destroy removes the cgroup from every hierarchy; a missing one is fine.
func (c *podCgroup) Destroy() error {
	if err := c.mgr.Destroy(); err != nil {
		return fmt.Errorf("remove cgroup %s: %w", c.path, err)
	}
	return nil
}

// Exists reports whether the cgroup is still there in some hierarchy.
func (c *podCgroup) Exists() bool {
	for _, p := range c.mgr.GetPaths() {
		if _, err := os.Stat(p); err == nil {
			return true
		}
	}
	return false
}
