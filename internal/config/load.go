package config

import (
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/BurntSushi/toml"
)

// Flags are the command-line flags of every key that has one, plus
// --config. Register them, parse the FlagSet, then Load.
type Flags struct {
	fs     *flag.FlagSet
	path   string
	values []*flagValue
}

// RegisterFlags adds --config and one flag per flag-tagged key to set.
func RegisterFlags(set *flag.FlagSet) *Flags {
	f := &Flags{fs: set}
	set.StringVar(&f.path, "config", DefaultPath, "configuration file (TOML); see `berth config default`")
	// Walking the defaults both finds the flags and gives their usage defaults.
	_ = walkLeaves(nil, reflect.ValueOf(Default()).Elem(), func(l leaf) error {
		name := l.flag()
		if name == "" {
			return nil
		}
		v := &flagValue{name: name, parts: l.parts, typ: l.field.Type, def: formatFlagValue(l.value)}
		usage := l.field.Tag.Get("doc") + " Config key: " + l.key() + "."
		if v.isList() {
			usage += " Repeatable and/or comma-separated."
		}
		f.values = append(f.values, v)
		set.Var(v, name, usage)
		return nil
	})
	return f
}

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

// TypeError is a key whose TOML value has the wrong type.
type TypeError struct {
	Key       string
	Want, Got string
}

func (e *TypeError) Error() string {
	return fmt.Sprintf("wrong type for key %q: want %s, got %s", e.Key, e.Want, e.Got)
}

func checkTable(parts []string, raw map[string]any, t reflect.Type) error {
	names := make(map[string]reflect.Type)
	for i := range t.NumField() {
		if n := tomlName(t.Field(i)); n != "" {
			names[n] = t.Field(i).Type
		}
	}
	for _, k := range slices.Sorted(maps.Keys(raw)) {
		ft, ok := names[k]
		if !ok {
			continue // unknown keys are reported after decoding
		}
		if err := checkType(append(slices.Clone(parts), k), raw[k], ft); err != nil {
			return err
		}
	}
	return nil
}

func checkType(parts []string, raw any, t reflect.Type) error {
	mismatch := func() error {
		return &TypeError{Key: keyPath(parts), Want: describeType(t), Got: describeValue(raw)}
	}
	if !isTable(t) && reflect.PointerTo(t).Implements(textUnmarshaler) {
		if _, ok := raw.(string); !ok {
			return mismatch()
		}
		return nil
	}
	ok := true
	switch t.Kind() {
	case reflect.String:
		_, ok = raw.(string)
	case reflect.Bool:
		_, ok = raw.(bool)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		_, ok = raw.(int64)
	case reflect.Float32, reflect.Float64:
		switch raw.(type) {
		case int64, float64:
		default:
			ok = false
		}
	case reflect.Slice:
		var items []any
		if items, ok = raw.([]any); ok {
			for _, item := range items {
				if checkType(parts, item, t.Elem()) != nil {
					return mismatch()
				}
			}
		}
	case reflect.Struct:
		var m map[string]any
		if m, ok = raw.(map[string]any); ok {
			return checkTable(parts, m, t)
		}
	case reflect.Map:
		var m map[string]any
		if m, ok = raw.(map[string]any); ok {
			for _, k := range slices.Sorted(maps.Keys(m)) {
				if err := checkType(append(slices.Clone(parts), k), m[k], t.Elem()); err != nil {
					return err
				}
			}
		}
	}
	if !ok {
		return mismatch()
	}
	return nil
}

func describeType(t reflect.Type) string {
	if !isTable(t) && reflect.PointerTo(t).Implements(textUnmarshaler) {
		return "a string"
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean (true or false)"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice:
		return "an array of " + strings.TrimPrefix(strings.TrimPrefix(describeType(t.Elem()), "a "), "an ") + "s"
	default:
		return "a table"
	}
}

func describeValue(v any) string {
	switch v := v.(type) {
	case string:
		return fmt.Sprintf("the string %q", v)
	case bool:
		return fmt.Sprintf("the boolean %t", v)
	case int64:
		return fmt.Sprintf("the integer %d", v)
	case float64:
		return fmt.Sprintf("the number %v", v)
	case []any:
		for _, item := range v {
			if _, ok := item.(string); !ok {
				return "an array containing " + describeValue(item)
			}
		}
		return "an array of strings"
	case map[string]any:
		return "a table"
	case time.Time:
		return "a date-time"
	default:
		return fmt.Sprintf("a %T", v)
	}
}

// flagValue collects a key's flag arguments until Load applies them over
// the file's values.
type flagValue struct {
	name  string
	parts []string
	typ   reflect.Type
	def   string
	raw   []string
	set   bool
}

func (v *flagValue) isList() bool { return v.typ.Kind() == reflect.Slice }

// IsBoolFlag lets boolean keys be given as a bare --flag.
func (v *flagValue) IsBoolFlag() bool { return v.typ != nil && v.typ.Kind() == reflect.Bool }

func (v *flagValue) String() string {
	switch {
	case v == nil: // the flag package's zero-value probe
		return ""
	case !v.set:
		return v.def
	default:
		return strings.Join(v.raw, ",")
	}
}

// Set keeps the raw argument; a list flag accumulates over repeats and
// commas, so --cni-bin-dir=/a,/b --cni-bin-dir=/c gives [/a /b /c].
func (v *flagValue) Set(s string) error {
	switch v.typ.Kind() {
	case reflect.Slice:
		for p := range strings.SplitSeq(s, ",") {
			if p = strings.TrimSpace(p); p != "" {
				v.raw = append(v.raw, p)
			}
		}
	case reflect.Bool:
		if _, err := strconv.ParseBool(s); err != nil {
			return errors.New("want true or false")
		}
		v.raw = []string{s}
	case reflect.Int, reflect.Int64:
		if _, err := strconv.ParseInt(s, 10, 64); err != nil {
			return errors.New("want an integer")
		}
		v.raw = []string{s}
	default:
		v.raw = []string{s}
	}
	v.set = true
	return nil
}

func (v *flagValue) apply(cfg *Config) error {
	field := reflect.ValueOf(cfg).Elem()
	for _, p := range v.parts {
		field = fieldByTOMLName(field, p)
	}
	switch v.typ.Kind() {
	case reflect.String:
		field.SetString(v.raw[0])
	case reflect.Slice:
		field.Set(reflect.ValueOf(slices.Clone(v.raw)))
	case reflect.Bool:
		b, _ := strconv.ParseBool(v.raw[0])
		field.SetBool(b)
	case reflect.Int, reflect.Int64:
		n, _ := strconv.ParseInt(v.raw[0], 10, 64)
		field.SetInt(n)
	default:
		return fmt.Errorf("config key %s: flags of type %s are not supported", keyPath(v.parts), v.typ)
	}
	return nil
}

func fieldByTOMLName(v reflect.Value, name string) reflect.Value {
	for i := range v.NumField() {
		if tomlName(v.Type().Field(i)) == name {
			return v.Field(i)
		}
	}
	panic("config: no field for key " + name) // the parts came from walking the same type
}

func formatFlagValue(v reflect.Value) string {
	if s, ok := v.Interface().([]string); ok {
		return strings.Join(s, ",")
	}
	return fmt.Sprint(v.Interface())
}
