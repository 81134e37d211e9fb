package monitor

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
)

// WriteExit records an exit in dir atomically: a reader sees either no
// file or the whole of it, whenever the writer dies.
func WriteExit(dir string, e *Exit) error {
	data, err := json.Marshal(e)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, ".exit-*")
	if err != nil {
		return fmt.Errorf("write exit file: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("write exit file: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("write exit file: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write exit file: %w", err)
	}
	if err := os.Rename(tmp.Name(), filepath.Join(dir, ExitFile)); err != nil {
		return fmt.Errorf("write exit file: %w", err)
	}
	return nil
}

// ReadExit returns the recorded exit, or nil if there is none yet.
func ReadExit(dir string) (*Exit, error) {
	data, err := os.ReadFile(filepath.Join(dir, ExitFile))
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	e := &Exit{}
	if err := json.Unmarshal(data, e); err != nil {
		return nil, fmt.Errorf("decode %s: %w", filepath.Join(dir, ExitFile), err)
	}
	return e, nil
}
