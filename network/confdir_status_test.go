package network

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestConfDirStatus(t *testing.T) {
	tests := []struct {
		name      string
		files     []string // created in the conf dir; a trailing / makes a dir
		noDir     bool
		wantReady bool
	}{
		{name: "missing dir", noDir: true},
		{name: "empty dir"},
		{name: "unrelated files", files: []string{"README", "10-net.conflist.bak", "sub.conf/"}},
		{name: "conflist", files: []string{"10-net.conflist"}, wantReady: true},
		{name: "conf", files: []string{"99-loopback.conf"}, wantReady: true},
		{name: "json", files: []string{"net.json"}, wantReady: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "net.d")
			if !tt.noDir {
				if err := os.Mkdir(dir, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			for _, f := range tt.files {
				p := filepath.Join(dir, f)
				var err error
				if strings.HasSuffix(f, "/") {
					err = os.Mkdir(p, 0o755)
				} else {
					err = os.WriteFile(p, []byte("{}"), 0o644)
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			got := ConfDirStatus{Dir: dir}.Status(context.Background())
			if got.Ready != tt.wantReady {
				t.Fatalf("Ready = %v, want %v (%+v)", got.Ready, tt.wantReady, got)
			}
			if !got.Ready && (got.Reason != ReasonNotReady || !strings.Contains(got.Message, dir)) {
				t.Errorf("not ready without reason %s and the dir in the message: %+v", ReasonNotReady, got)
			}
		})
	}
}
