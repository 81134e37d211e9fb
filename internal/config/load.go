package config

import (
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/BurntSushi/toml"
)

// Load returns the effective configuration: the defaults, overridden by the
// config file, overridden by the flags given on the command line. Every
// error is one line naming the offending key or flag.
func (f *Flags) Load() (*Config, error) {
	cfg := Default()
	explicit := false
	f.fs.Visit(func(fl *flag.Flag) { explicit = explicit || fl.Name == "config" })

	loaded := false
	data, err := os.ReadFile(f.path)
	switch {
	case err == nil:
		if err := decode(cfg, string(data)); err != nil {
			return nil, fmt.Errorf("config %s: %w", f.path, err)
		}
		loaded = true
	case errors.Is(err, fs.ErrNotExist) && !explicit:
		// Running on defaults and flags alone is normal.
	default:
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return nil, fmt.Errorf("config %s: %w", f.path, err)
	}

	byKey := make(map[string]*flagValue)
	for _, v := range f.values {
		if !v.set {
			continue
		}
		if err := v.apply(cfg); err != nil {
			return nil, err
		}
		byKey[keyPath(v.parts)] = v
	}
	cfg.Address = strings.TrimPrefix(cfg.Address, "unix://")

	if err := cfg.Validate(); err != nil {
		var ve *ValueError
		if errors.As(err, &ve) {
			if v := byKey[ve.Key]; v != nil {
				return nil, fmt.Errorf("invalid --%s %q: want %s", v.name, ve.Value, ve.Want)
			}
			if loaded {
				return nil, fmt.Errorf("config %s: %w", f.path, err)
			}
		}
		return nil, err
	}
	return cfg, nil
}

// Parse is Load for a config file's content alone, without flags.
func Parse(data string) (*Config, error) {
	cfg := Default()
	if err := decode(cfg, data); err != nil {
		return nil, err
	}
	cfg.Address = strings.TrimPrefix(cfg.Address, "unix://")
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return cfg, nil
}

// decode overlays the TOML document data on cfg. Types are checked against
// a generic decode first, because the toml package's own type errors do not
// read well.
func decode(cfg *Config, data string) error {
	var raw map[string]any
	if _, err := toml.Decode(data, &raw); err != nil {
		var pe toml.ParseError
		if errors.As(err, &pe) {
			return fmt.Errorf("line %d: %s", pe.Position.Line, pe.Message)
		}
		return err
	}
	if err := checkTable(nil, raw, reflect.TypeFor[Config]()); err != nil {
		return err
	}
	md, err := toml.Decode(data, cfg)
	if err != nil {
		return err
	}
	if unknown := topmost(md.Undecoded()); len(unknown) > 0 {
		quoted := make([]string, len(unknown))
		for i, k := range unknown {
			quoted[i] = strconv.Quote(k)
		}
		if len(quoted) == 1 {
			return fmt.Errorf("unknown key %s", quoted[0])
		}
		return fmt.Errorf("unknown keys %s", strings.Join(quoted, ", "))
	}
	return nil
}

// topmost drops keys below another undecoded key: an unknown table is
// reported once, not once per key in it.
func topmost(keys []toml.Key) []string {
	var out []string
	for _, k := range keys {
		covered := false
		for _, other := range keys {
			if len(other) < len(k) && slices.Equal(other, k[:len(other)]) {
				covered = true
				break
			}
		}
		if !covered {
			out = append(out, keyPath(k))
		}
	}
	return out
}
