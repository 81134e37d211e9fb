package config

import (
	"errors"
	"flag"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
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
	set.StringVar(&f.path, "config", DefaultPath, "`file` to read the configuration from (TOML; berth config default prints one); a missing "+DefaultPath+" is fine")
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
