package spawn

import (
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
