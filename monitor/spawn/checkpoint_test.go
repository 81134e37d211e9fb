package spawn

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/berth-runtime/berth/monitor"
)

// The refusals that come before CRIU is run; the dump itself needs a
// running container and a working CRIU (test/container
// TestCheckpointContainer).
func TestCheckpointRefusals(t *testing.T) {
	root := t.TempDir()
	for _, tc := range []struct {
		name string
		req  monitor.SpawnRequest
		want string
	}{
		{"no images dir", monitor.SpawnRequest{Op: monitor.SpawnCheckpoint, Root: root, ID: "c1", WorkDir: root}, "no images or work directory"},
		{"no work dir", monitor.SpawnRequest{Op: monitor.SpawnCheckpoint, Root: root, ID: "c1", ImagesDir: root + "/ckpt"}, "no images or work directory"},
		{"unknown container", monitor.SpawnRequest{Op: monitor.SpawnCheckpoint, Root: root, ID: "c1", ImagesDir: root + "/ckpt", WorkDir: root}, "container c1: checkpoint:"},
		{"no state root", monitor.SpawnRequest{Op: monitor.SpawnCheckpoint, ID: "c1"}, "no state root or id"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := run(&tc.req, nil)
			if res.Error == "" || !strings.Contains(res.Error, tc.want) {
				t.Errorf("checkpoint: %q, want an error with %q", res.Error, tc.want)
			}
		})
	}
}

// A checkpoint dumps established TCP connections only where the request
// asks (a pod's checkpoint), and always leaves the container running.
func TestDumpOptions(t *testing.T) {
	for _, tcp := range []bool{false, true} {
		o := dumpOptions(&monitor.SpawnRequest{Op: monitor.SpawnCheckpoint, ImagesDir: "/w/checkpoint", WorkDir: "/w", TCPEstablished: tcp})
		if o.ImagesDirectory != "/w/checkpoint" || o.WorkDirectory != "/w" || !o.LeaveRunning || o.TcpEstablished != tcp {
			t.Errorf("tcpEstablished %v: %+v", tcp, o)
		}
	}
}

// A restore asks CRIU for what the dump was made with, as berth wrote it
// beside the images; a restore directory without the file asks nothing.
func TestRestoreOptions(t *testing.T) {
	for _, tc := range []struct {
		name, file string // file: none when empty
		tcp        bool
		err        string
	}{
		{"no options file", "", false, ""},
		{"tcp-established", `{"tcpEstablished":true}`, true, ""},
		{"nothing asked", `{}`, false, ""},
		{"not JSON", `{`, false, monitor.RestoreOptionsFile},
	} {
		t.Run(tc.name, func(t *testing.T) {
			work := t.TempDir()
			if tc.file != "" {
				if err := os.WriteFile(filepath.Join(work, monitor.RestoreOptionsFile), []byte(tc.file), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			o, err := restoreOptions(work)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("restoreOptions: %v, want an error naming %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if o.ImagesDirectory != filepath.Join(work, "checkpoint") || o.WorkDirectory != work || o.TcpEstablished != tc.tcp || o.LeaveRunning {
				t.Errorf("restoreOptions: %+v, want tcpEstablished %v", o, tc.tcp)
			}
		})
	}
}
