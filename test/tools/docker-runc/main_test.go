package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

func TestSpecFiles(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want []specFile
	}{
		{"create as containerd's shim calls it",
			[]string{"--root", "/run/docker/runtime-runc/moby", "--log", "/run/x/log.json", "--log-format", "json", "create", "--bundle", "/b", "--pid-file", "/b/init.pid", "id"},
			[]specFile{{path: "/b/config.json"}}},
		{"create with flag=value", []string{"--root=/r", "create", "--bundle=/b", "id"}, []specFile{{path: "/b/config.json"}}},
		{"create in the bundle dir", []string{"create", "id"}, []specFile{{path: "config.json"}}},
		{"exec", []string{"--root", "/r", "exec", "--process", "/tmp/p.json", "--detach", "id"}, []specFile{{path: "/tmp/p.json", process: true}}},
		{"start", []string{"--root", "/r", "start", "id"}, nil},
		{"delete", []string{"--root", "/r", "delete", "--force", "id"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := specFiles(tc.args); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("specFiles(%q) = %v, want %v", tc.args, got, tc.want)
			}
		})
	}
}

func TestDropCaps(t *testing.T) {
	all := []string{"CAP_CHOWN", "CAP_SYS_RESOURCE", "CAP_SYS_ADMIN"}
	kept := []string{"CAP_CHOWN", "CAP_SYS_ADMIN"}
	caps := map[string][]string{"bounding": all, "effective": all, "permitted": all}
	wantCaps := map[string][]string{"bounding": kept, "effective": kept, "permitted": kept}
	missing := map[string]bool{"CAP_SYS_RESOURCE": true}
	for _, tc := range []struct {
		name    string
		process bool
		doc     map[string]any
		want    map[string]any
	}{
		{"config.json", false,
			map[string]any{"ociVersion": "1.0.2", "process": map[string]any{"cwd": "/", "capabilities": caps}},
			map[string]any{"ociVersion": "1.0.2", "process": map[string]any{"cwd": "/", "capabilities": wantCaps}}},
		{"process file", true,
			map[string]any{"cwd": "/", "capabilities": caps},
			map[string]any{"cwd": "/", "capabilities": wantCaps}},
		{"no capabilities", false,
			map[string]any{"process": map[string]any{"cwd": "/"}},
			map[string]any{"process": map[string]any{"cwd": "/"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "spec.json")
			data, _ := json.Marshal(tc.doc)
			if err := os.WriteFile(path, data, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := dropCaps(path, tc.process, missing); err != nil {
				t.Fatal(err)
			}
			got, want := decode(t, path), roundTrip(t, tc.want)
			if !reflect.DeepEqual(got, want) {
				t.Errorf("got %v, want %v", got, want)
			}
		})
	}
}

func decode(t *testing.T, path string) any {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var v any
	if err := json.Unmarshal(data, &v); err != nil {
		t.Fatal(err)
	}
	return v
}

func roundTrip(t *testing.T, v any) any {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out any
	if err := json.Unmarshal(data, &out); err != nil {
		t.Fatal(err)
	}
	return out
}
