package monitor

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// ReadSpec decodes the spec berth wrote in a container's directory.
func ReadSpec(dir string) (*specs.Spec, error) {
	data, err := os.ReadFile(filepath.Join(dir, SpecFile))
	if err != nil {
		return nil, fmt.Errorf("read spec: %w", err)
	}
	s := &specs.Spec{}
	if err := json.Unmarshal(data, s); err != nil {
		return nil, fmt.Errorf("decode spec: %w", err)
	}
	if s.Process == nil {
		return nil, errors.New("spec without a process")
	}
	return s, nil
}
