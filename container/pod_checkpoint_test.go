package container

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestOpenPodCheckpoint(t *testing.T) {
	archive := tarOf(t, checkpointEntries(t, nil, nil))
	const two = `{"version":1,"podId":"p","containers":[{"name":"a","id":"1","archive":"1.tar","image":"sha256:1234"},{"name":"b","id":"2","archive":"2.tar","image":"sha256:1234"}]}`
	for _, tc := range []struct {
		name     string
		manifest string // none when empty
		archives []string
		want     string // a part of the error; none when empty
	}{
		{"two containers", two, []string{"1.tar", "2.tar"}, ""},
		{"no manifest", "", []string{"1.tar"}, "is not a pod checkpoint"},
		{"not JSON", "{", nil, "pod.json"},
		{"another version", `{"version":2,"containers":[{"name":"a","archive":"1.tar"}]}`, []string{"1.tar"}, "version 2"},
		{"no containers", `{"version":1,"containers":[]}`, nil, "no containers"},
		{"unnamed container", `{"version":1,"containers":[{"archive":"1.tar"}]}`, []string{"1.tar"}, "empty or not unique"},
		{"one name twice", `{"version":1,"containers":[{"name":"a","archive":"1.tar"},{"name":"a","archive":"2.tar"}]}`, []string{"1.tar", "2.tar"}, "empty or not unique"},
		{"archive outside", `{"version":1,"containers":[{"name":"a","archive":"../1.tar"}]}`, nil, "not a file of the checkpoint's directory"},
		{"archive in a subdirectory", `{"version":1,"containers":[{"name":"a","archive":"x/1.tar"}]}`, nil, "not a file of the checkpoint's directory"},
		{"archive missing", two, []string{"1.tar"}, `container "b"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if tc.manifest != "" {
				writeTestFile(t, filepath.Join(dir, podManifest), []byte(tc.manifest))
			}
			for _, a := range tc.archives {
				writeTestFile(t, filepath.Join(dir, a), archive)
			}
			p, err := OpenPodCheckpoint(dir)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("OpenPodCheckpoint: %v", err)
				}
				if c, ok := p.Container("b"); !ok || c.Archive != "2.tar" || c.Image != "sha256:1234" {
					t.Errorf("container b: %+v %v", c, ok)
				}
				if _, ok := p.Container("c"); ok {
					t.Errorf("container c found in a checkpoint of a and b")
				}
				return
			}
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("OpenPodCheckpoint: %v, want ErrInvalid naming %q", err, tc.want)
			}
		})
	}
	if _, err := OpenPodCheckpoint("ckpt"); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "absolute") {
		t.Errorf("a relative checkpoint_path: %v, want ErrInvalid", err)
	}
}

func TestCheckPodCheckpointDir(t *testing.T) {
	empty, full := t.TempDir(), t.TempDir()
	writeTestFile(t, filepath.Join(full, "x"), nil)
	for _, tc := range []struct {
		dir, want string
	}{
		{empty, ""},
		{"", "required"},
		{"ckpt", "not an absolute path"},
		{filepath.Join(empty, "missing"), "not a directory that exists"},
		{filepath.Join(full, "x"), "not a directory that exists"},
		{full, "not empty"},
	} {
		err := checkPodCheckpointDir(tc.dir)
		if tc.want == "" && err != nil || tc.want != "" && (!errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%q: %v, want %q", tc.dir, err, tc.want)
		}
	}
}

func writeTestFile(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// CheckRestore is the CRIU check a create from an archive asks, for a
// pod restore to ask before it makes the pod: the error is exactly
// ErrCheckpointUnavailable, whose text the kubelet matches.
func TestCheckRestore(t *testing.T) {
	for _, tc := range []struct {
		name   string
		script string // the fake criu; "" is none on PATH
		want   error
	}{
		{"works", "#!/bin/sh\necho Looks good.\n", nil},
		{"check fails", "#!/bin/sh\necho 'Error (criu/vdso.c:381): vdso: Unexpected rt vDSO area bounds' >&2\nexit 1\n", ErrCheckpointUnavailable},
		{"missing", "", ErrCheckpointUnavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fakeCRIU(t, tc.script)
			s := newTestService(t)
			if err := s.CheckRestore(t.TempDir()); err != tc.want {
				t.Errorf("CheckRestore() = %v, want %v", err, tc.want)
			}
		})
	}
}
