package monitor

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
)

// exitFileVersion is the format of the exit file. A monitor outlives
// berth's upgrades, so the berth reading a file may be older or newer than
// the monitor that wrote it; a file without a version is version 1.
const exitFileVersion = 1

type exitFile struct {
	FormatVersion int `json:"formatVersion"`
	*Exit
}

// WriteExit records an exit in dir atomically: a reader sees either no
// file or the whole of it, whenever the writer dies.
func WriteExit(dir string, e *Exit) error {
	data, err := json.Marshal(exitFile{FormatVersion: exitFileVersion, Exit: e})
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
	f := exitFile{Exit: &Exit{}}
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("decode %s: %w", filepath.Join(dir, ExitFile), err)
	}
	if f.FormatVersion > exitFileVersion {
		return nil, fmt.Errorf("exit file %s has format version %d, newer than version %d, the newest this berth reads", filepath.Join(dir, ExitFile), f.FormatVersion, exitFileVersion)
	}
	return f.Exit, nil
}
