package config

import (
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"time"
)

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
