package config

import (
	"encoding"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// leaf is one non-table value of the configuration.
type leaf struct {
	parts []string // TOML key path, e.g. ["cni", "conf_dir"]
	field reflect.StructField
	value reflect.Value // settable unless inside a map entry
}

func (l leaf) key() string    { return keyPath(l.parts) }
func (l leaf) flag() string   { return l.field.Tag.Get("flag") }
func (l leaf) secret() bool   { return l.field.Tag.Get("secret") == "true" }
func (l leaf) checks() string { return l.field.Tag.Get("check") }

// walkLeaves calls fn for every non-table value under the struct v, in
// declaration order, descending into sub-tables and into the entries of
// maps of tables (in key order).
func walkLeaves(parts []string, v reflect.Value, fn func(leaf) error) error {
	t := v.Type()
	for i := range t.NumField() {
		sf := t.Field(i)
		name := tomlName(sf)
		if name == "" {
			continue
		}
		p := append(slices.Clone(parts), name)
		fv := v.Field(i)
		var err error
		switch {
		case isTable(sf.Type):
			err = walkLeaves(p, fv, fn)
		case isTableMap(sf.Type):
			for _, k := range sortedKeys(fv) {
				if err = walkLeaves(append(slices.Clone(p), k), fv.MapIndex(reflect.ValueOf(k)), fn); err != nil {
					break
				}
			}
		default:
			err = fn(leaf{parts: p, field: sf, value: fv})
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func tomlName(sf reflect.StructField) string {
	if !sf.IsExported() {
		return ""
	}
	name, _, _ := strings.Cut(sf.Tag.Get("toml"), ",")
	if name == "-" {
		return ""
	}
	return name
}

var textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()

// isTable reports whether values of t are written as TOML tables.
func isTable(t reflect.Type) bool {
	return t.Kind() == reflect.Struct && !reflect.PointerTo(t).Implements(textUnmarshaler)
}

// isTableMap reports whether t is a map of named tables, such as
// [registries."docker.io"].
func isTableMap(t reflect.Type) bool {
	return t.Kind() == reflect.Map && t.Key().Kind() == reflect.String && isTable(t.Elem())
}

func sortedKeys(m reflect.Value) []string {
	keys := make([]string, 0, m.Len())
	for _, k := range m.MapKeys() {
		keys = append(keys, k.String())
	}
	slices.Sort(keys)
	return keys
}

var bareKey = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

// keyPath joins key parts the way TOML writes them: registries."docker.io".
func keyPath(parts []string) string {
	quoted := make([]string, len(parts))
	for i, p := range parts {
		if bareKey.MatchString(p) {
			quoted[i] = p
		} else {
			quoted[i] = strconv.Quote(p)
		}
	}
	return strings.Join(quoted, ".")
}
