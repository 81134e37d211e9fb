package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/BurntSushi/toml"

	"github.com/berth-runtime/berth/admin"
	"github.com/berth-runtime/berth/image"
)

// fakeImages records what the stand-in asked the daemon for.
type fakeImages struct {
	imported string
	pinned   bool
	tags     []string
	force    bool
}

func (f *fakeImages) Import(_ context.Context, r io.Reader, opts image.ImportOptions) ([]image.Imported, error) {
	b, _ := io.ReadAll(r)
	f.imported, f.pinned = string(b), opts.Pinned
	return []image.Imported{{ID: "sha256:0123", RepoTags: []string{"docker.io/library/app:v1"}}}, nil
}

func (f *fakeImages) Tag(_ context.Context, src, target string, force bool) (image.Image, error) {
	f.tags, f.force = append(f.tags, src+"->"+target), force
	return image.Image{ID: src, RepoTags: []string{target}}, nil
}

// Pulls: the stand-ins never list pulls.
func (f *fakeImages) Pulls() []image.PullStatus { return nil }

func fakeDaemon(t *testing.T) (string, *fakeImages) {
	t.Helper()
	f := &fakeImages{}
	cri := filepath.Join(t.TempDir(), "berth.sock")
	l, err := net.Listen("unix", admin.SocketPath(cri))
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: admin.NewHandler(f, slog.New(slog.NewTextHandler(io.Discard, nil)))}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return cri, f
}

func TestRun(t *testing.T) {
	tests := []struct {
		name       string
		args       []string
		stdin      string
		wantCode   int
		wantOut    string
		wantErr    string
		wantImport string
		wantPinned bool
		wantTags   []string
		wantForce  bool
	}{
		{
			name:       "kind load's import",
			args:       []string{"ctr", "--namespace=k8s.io", "images", "import", "--all-platforms", "--digests", "--snapshotter=overlayfs", "-"},
			stdin:      "archive",
			wantOut:    "unpacking docker.io/library/app:v1 (sha256:0123)...done\n",
			wantImport: "archive",
		},
		{
			name:       "kind build's pinned import, -n and image alias",
			args:       []string{"ctr", "-n", "k8s.io", "i", "import", "--label=io.cri-containerd.pinned=pinned", "--all-platforms", "-"},
			stdin:      "x",
			wantImport: "x",
			wantPinned: true,
		},
		{
			name:      "kind load's retag",
			args:      []string{"ctr", "--namespace=k8s.io", "images", "tag", "--force", "sha256:0123", "docker.io/library/app:v2"},
			wantOut:   "docker.io/library/app:v2\n",
			wantTags:  []string{"sha256:0123->docker.io/library/app:v2"},
			wantForce: true,
		},
		{
			name:     "tag to two names",
			args:     []string{"berth-ctr", "ctr", "--namespace", "k8s.io", "image", "tag", "a:1", "b:1", "c:1"},
			wantOut:  "b:1\nc:1\n",
			wantTags: []string{"a:1->b:1", "a:1->c:1"},
		},
		{name: "config dump", args: []string{"containerd", "config", "dump"}, wantOut: `snapshotter = "overlayfs"`},
		{name: "containerd version", args: []string{"containerd", "--version"}, wantOut: "containerd berth-ctr"},
		{name: "ctr version", args: []string{"ctr", "version"}, wantOut: "ctr berth-ctr"},
		{name: "ctr -v", args: []string{"ctr", "-v"}, wantOut: "ctr berth-ctr"},
		{name: "containerd daemon", args: []string{"containerd"}, wantCode: 2, wantErr: `does not implement "containerd": berth, not containerd`},
		{name: "images list", args: []string{"ctr", "-n=k8s.io", "images", "list"}, wantCode: 2, wantErr: "use crictl or berth"},
		{name: "no-unpack", args: []string{"ctr", "-n=k8s.io", "images", "import", "--no-unpack", "-"}, wantCode: 2, wantErr: "does not implement"},
		{name: "two archives", args: []string{"ctr", "-n=k8s.io", "images", "import", "a.tar", "b.tar"}, wantCode: 2, wantErr: "does not implement"},
		{name: "other snapshotter", args: []string{"ctr", "-n=k8s.io", "images", "import", "--snapshotter=zfs", "-"}, wantCode: 1, wantErr: "berth's layers are overlayfs"},
		{name: "default namespace", args: []string{"ctr", "images", "import", "-"}, wantCode: 1, wantErr: `namespace "default"`},
		{name: "unknown global flag", args: []string{"ctr", "--debug", "images", "import", "-"}, wantCode: 2, wantErr: "does not implement"},
		{name: "tasks", args: []string{"ctr", "-n", "k8s.io", "tasks", "ls"}, wantCode: 2, wantErr: "does not implement"},
		{name: "bare berth-ctr", args: []string{"berth-ctr"}, wantCode: 2, wantErr: "usage"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cri, f := fakeDaemon(t)
			getenv := func(k string) string {
				if k == "CONTAINERD_ADDRESS" {
					return cri
				}
				return ""
			}
			var stdout, stderr bytes.Buffer
			code := run(context.Background(), tt.args, strings.NewReader(tt.stdin), &stdout, &stderr, getenv)
			if code != tt.wantCode || !strings.Contains(stdout.String(), tt.wantOut) || !strings.Contains(stderr.String(), tt.wantErr) {
				t.Errorf("exit %d stdout %q stderr %q; want %d, %q, %q", code, stdout.String(), stderr.String(), tt.wantCode, tt.wantOut, tt.wantErr)
			}
			if f.imported != tt.wantImport || f.pinned != tt.wantPinned || strings.Join(f.tags, ",") != strings.Join(tt.wantTags, ",") || f.force != tt.wantForce {
				t.Errorf("daemon saw import %q pinned %v tags %v force %v", f.imported, f.pinned, f.tags, f.force)
			}
		})
	}
}

// TestConfigDumpParses as kind's parseSnapshotter does: version 3, the
// snapshotter under plugins."io.containerd.cri.v1.images".
func TestConfigDumpParses(t *testing.T) {
	var dump struct {
		Version int64
		Plugins map[string]map[string]any
	}
	if _, err := toml.Decode(configDump, &dump); err != nil {
		t.Fatal(err)
	}
	if dump.Version != 3 || dump.Plugins["io.containerd.cri.v1.images"]["snapshotter"] != "overlayfs" {
		t.Errorf("dump: %+v", dump)
	}
}
