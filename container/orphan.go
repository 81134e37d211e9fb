package container

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// dropRuntimeState removes what libcontainer keeps for a container whose
// monitor died before destroying it: the container's cgroups (its
// processes are gone: monitorGone killed them) and its state directory.
func (s *Service) dropRuntimeState(id string) error {
	dir := filepath.Join(s.runc, id)
	data, err := os.ReadFile(filepath.Join(dir, "state.json"))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("libcontainer state: %w", err)
	}
	if err == nil {
		var st struct {
			CgroupPaths map[string]string `json:"cgroup_paths"`
		}
		if err := json.Unmarshal(data, &st); err != nil {
			return fmt.Errorf("libcontainer state: %w", err)
		}
		for _, p := range st.CgroupPaths {
			// A cgroup holding no process is removed by rmdir, its
			// control files with it.
			if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
				return fmt.Errorf("remove cgroup %s: %w", p, err)
			}
		}
	}
	return os.RemoveAll(dir)
}
