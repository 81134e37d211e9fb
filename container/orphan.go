package container

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/opencontainers/cgroups"

	"github.com/berth-runtime/berth/internal/cgroup"
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
			Config struct {
				Cgroups *cgroups.Cgroup `json:"cgroups"`
			} `json:"config"`
			CgroupPaths map[string]string `json:"cgroup_paths"`
		}
		if err := json.Unmarshal(data, &st); err != nil {
			return fmt.Errorf("libcontainer state: %w", err)
		}
		// As libcontainer's destroy would: a systemd scope stopped and
		// reset, the directories removed.
		if err := cgroup.Remove(st.Config.Cgroups, st.CgroupPaths); err != nil {
			return fmt.Errorf("remove cgroup: %w", err)
		}
	}
	return os.RemoveAll(dir)
}
