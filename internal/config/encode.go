package config

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"reflect"
	"slices"
	"strings"

	"github.com/BurntSushi/toml"
)

const header = `# berth daemon configuration.
#
# Read from /etc/berth/config.toml, or from the file given with --config.
# Every key is optional; a missing key keeps the default shown here, and a
# command-line flag overrides the file. Unknown keys are an error.
`

// WriteTOML writes c as a TOML document with a comment above every key;
// Parse reads it back to c. `berth config default` is Default().WriteTOML.
func (c *Config) WriteTOML(w io.Writer) error {
	var b bytes.Buffer
	b.WriteString(header)
	if err := writeTable(&b, nil, reflect.ValueOf(c).Elem()); err != nil {
		return err
	}
	_, err := w.Write(b.Bytes())
	return err
}

func writeTable(b *bytes.Buffer, parts []string, v reflect.Value) error {
	t := v.Type()
	// TOML needs a table's own keys before any of its sub-tables.
	for i := range t.NumField() {
		sf := t.Field(i)
		name := tomlName(sf)
		if name == "" || isTable(sf.Type) || isTableMap(sf.Type) {
			continue
		}
		b.WriteString("\n")
		writeComment(b, sf.Tag.Get("doc"))
		if fl := sf.Tag.Get("flag"); fl != "" {
			fmt.Fprintf(b, "# Flag: --%s.\n", fl)
		}
		if err := toml.NewEncoder(b).Encode(map[string]any{name: v.Field(i).Interface()}); err != nil {
			return fmt.Errorf("encode %s: %w", keyPath(append(slices.Clone(parts), name)), err)
		}
	}
	for i := range t.NumField() {
		sf := t.Field(i)
		name := tomlName(sf)
		p := append(slices.Clone(parts), name)
		switch {
		case name == "":
		case isTable(sf.Type):
			b.WriteString("\n")
			writeComment(b, sf.Tag.Get("doc"))
			fmt.Fprintf(b, "[%s]\n", keyPath(p))
			if err := writeTable(b, p, v.Field(i)); err != nil {
				return err
			}
		case isTableMap(sf.Type):
			b.WriteString("\n")
			writeComment(b, sf.Tag.Get("doc"))
			m := v.Field(i)
			for n, k := range sortedKeys(m) {
				kp := append(slices.Clone(p), k)
				if n > 0 {
					// Every table says what it is, not only the first.
					first, _, _ := strings.Cut(sf.Tag.Get("doc"), ". ")
					b.WriteString("\n")
					writeComment(b, strings.TrimSuffix(first, ".")+".")
				}
				fmt.Fprintf(b, "[%s]\n", keyPath(kp))
				if err := writeTable(b, kp, m.MapIndex(reflect.ValueOf(k))); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// writeComment wraps text into "# " lines of at most 78 columns. A
// newline in text starts a new line (for examples).
func writeComment(b *bytes.Buffer, text string) {
	first, rest, more := strings.Cut(text, "\n")
	if more {
		writeComment(b, first)
		writeComment(b, rest)
		return
	}
	line := "#"
	for _, word := range strings.Fields(text) {
		if len(line)+1+len(word) > 78 && line != "#" {
			b.WriteString(line + "\n")
			line = "#"
		}
		line += " " + word
	}
	if line != "#" {
		b.WriteString(line + "\n")
	}
}

// JSON renders the effective configuration with its TOML key names and
// secrets redacted, for Status(verbose) and logs.
func (c *Config) JSON() ([]byte, error) {
	return json.Marshal(toMap(reflect.ValueOf(c).Elem()))
}

func toMap(v reflect.Value) map[string]any {
	out := make(map[string]any)
	t := v.Type()
	for i := range t.NumField() {
		sf := t.Field(i)
		name := tomlName(sf)
		fv := v.Field(i)
		switch {
		case name == "":
		case isTable(sf.Type):
			out[name] = toMap(fv)
		case isTableMap(sf.Type):
			entries := make(map[string]any, fv.Len())
			for _, k := range sortedKeys(fv) {
				entries[k] = toMap(fv.MapIndex(reflect.ValueOf(k)))
			}
			out[name] = entries
		case sf.Tag.Get("secret") == "true" && !fv.IsZero():
			out[name] = "<redacted>"
		default:
			out[name] = fv.Interface()
		}
	}
	return out
}
