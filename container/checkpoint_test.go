package container

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/berth-runtime/berth/container/spec"
	"github.com/berth-runtime/berth/monitor"
	"golang.org/x/sys/unix"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func TestCheckLocation(t *testing.T) {
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o700); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, location, want string // want: "" or a part of the error
	}{
		{"fine", filepath.Join(dir, "ckpt.tar"), ""},
		{"existing file is replaced", filepath.Join(dir, "sub", "..", "ckpt.tar"), ""},
		{"empty", "", "location: required"},
		{"relative", "ckpt.tar", "not an absolute path"},
		{"trailing slash", dir + "/ckpt/", "names a directory"},
		{"a directory", filepath.Join(dir, "sub"), "is a directory"},
		{"no such directory", filepath.Join(dir, "missing", "ckpt.tar"), "does not exist"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := checkLocation(tc.location)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("checkLocation(%q) = %v", tc.location, err)
				}
				return
			}
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("checkLocation(%q) = %v, want InvalidArgument with %q", tc.location, err, tc.want)
			}
		})
	}
}

// tarContents are the names and contents (regular files) of a tar.
func tarContents(t *testing.T, r io.Reader) map[string]string {
	t.Helper()
	out := map[string]string{}
	tr := tar.NewReader(r)
	for h, err := range tarEntries(tr) {
		if err != nil {
			t.Fatal(err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		switch h.Typeflag {
		case tar.TypeSymlink:
			out[h.Name] = "-> " + h.Linkname
		default:
			out[h.Name] = string(data)
		}
	}
	return out
}

func TestWriteRootfsDiff(t *testing.T) {
	upper := t.TempDir()
	root := filepath.Join(upper, "upper")
	for _, d := range []string{"etc", "data/sub"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "data/sub/f"), []byte("written"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/data/sub/f", filepath.Join(root, "link")); err != nil {
		t.Fatal(err)
	}
	// A link to the host's /etc as the container sees it: a link, never
	// walked into.
	if err := os.Symlink("/etc", filepath.Join(root, "hostetc")); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mkfifo(filepath.Join(root, "fifo"), 0o600); err != nil {
		t.Fatal(err)
	}
	wantDeleted := []string{}
	if os.Getuid() == 0 {
		// An overlay whiteout: the file is deleted in the container.
		if err := unix.Mknod(filepath.Join(root, "etc/motd"), unix.S_IFCHR|0o600, 0); err != nil {
			t.Fatal(err)
		}
		wantDeleted = append(wantDeleted, "etc/motd")
	}
	work := t.TempDir()
	if err := writeRootfsDiff(upper, work); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(filepath.Join(work, rootfsDiff))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	got := tarContents(t, f)
	want := map[string]string{"data/": "", "data/sub/": "", "data/sub/f": "written", "etc/": "", "link": "-> /data/sub/f", "hostetc": "-> /etc", "fifo": ""}
	if len(got) != len(want) {
		t.Errorf("rootfs diff holds %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("rootfs diff: %s = %q, want %q", k, got[k], v)
		}
	}
	var deleted []string
	data, err := os.ReadFile(filepath.Join(work, deletedFiles))
	if len(wantDeleted) == 0 {
		if !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s written with nothing deleted: %v", deletedFiles, err)
		}
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &deleted); err != nil || !slices.Equal(deleted, wantDeleted) {
		t.Errorf("%s = %s (%v), want %q", deletedFiles, data, err, wantDeleted)
	}
}

func TestWriteArchive(t *testing.T) {
	work := t.TempDir()
	for name, content := range map[string]string{
		"checkpoint/inventory.img": "inv", "checkpoint/pages-1.img": "pages",
		dumpLog: "log", rootfsDiff: "tar", specDump: "stale: replaced by files",
	} {
		p := filepath.Join(work, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	out := t.TempDir()
	for _, tc := range []struct {
		name, work string
		ok         bool
	}{
		{"complete", work, true},
		{"work directory gone", filepath.Join(work, "missing"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			location := filepath.Join(out, tc.name+".tar")
			err := writeArchive(location, tc.work, map[string][]byte{specDump: []byte(`{"ociVersion":"1"}`), configDump: []byte(`{"id":"c"}`)})
			entries, _ := os.ReadDir(out)
			if !tc.ok {
				if err == nil {
					t.Fatal("writeArchive of a missing work directory succeeded")
				}
				for _, e := range entries {
					if strings.HasPrefix(e.Name(), "."+filepath.Base(location)) || e.Name() == filepath.Base(location) {
						t.Errorf("failed writeArchive left %s", e.Name())
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			f, err := os.Open(location)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			got := tarContents(t, f)
			want := map[string]string{
				specDump: `{"ociVersion":"1"}`, configDump: `{"id":"c"}`, "checkpoint/": "",
				"checkpoint/inventory.img": "inv", "checkpoint/pages-1.img": "pages", dumpLog: "log", rootfsDiff: "tar",
			}
			if len(got) != len(want) {
				t.Errorf("archive holds %v, want %v", got, want)
			}
			for k, v := range want {
				if got[k] != v {
					t.Errorf("archive: %s = %q, want %q", k, got[k], v)
				}
			}
		})
	}
}

func TestDescribe(t *testing.T) {
	created := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	rec := &Record{ID: "c1", PodID: "p1", ImageID: "sha256:abc", ImageRef: "docker.io/library/busybox@sha256:def", CreatedAt: created.UnixNano()}
	for _, tc := range []struct {
		name  string
		image *runtimeapi.ImageSpec
		want  string
	}{
		{"by the name the pod gave", &runtimeapi.ImageSpec{Image: "sha256:abc", UserSpecifiedImage: "busybox:1.36"}, "busybox:1.36"},
		{"by the image asked for", &runtimeapi.ImageSpec{Image: "busybox"}, "busybox"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := &runtimeapi.ContainerConfig{Metadata: &runtimeapi.ContainerMetadata{Name: "web"}, Image: tc.image}
			d := describe(rec, cfg, created.Add(time.Hour), false)
			if d.ID != "c1" || d.Name != "web" || d.RootfsImage != tc.want || d.RootfsImageRef != "sha256:abc" ||
				d.RootfsImageName != rec.ImageRef || !d.CreatedTime.Equal(created) || !d.CheckpointedAt.Equal(created.Add(time.Hour)) {
				t.Errorf("describe = %+v", d)
			}
		})
	}
}

// config.dump says whether the dump holds established TCP connections,
// and a container checkpoint's keeps CRI-O's fields alone.
func TestDescribeTCPEstablished(t *testing.T) {
	rec := &Record{ID: "c1", PodID: "p1", ImageID: "sha256:abc"}
	cfg := &runtimeapi.ContainerConfig{Metadata: &runtimeapi.ContainerMetadata{Name: "web"}, Image: &runtimeapi.ImageSpec{Image: "busybox"}}
	for _, tcp := range []bool{false, true} {
		data, err := json.Marshal(describe(rec, cfg, time.Now(), tcp))
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Contains(string(data), `"tcpEstablished":true`); got != tcp || !tcp && strings.Contains(string(data), "tcpEstablished") {
			t.Errorf("tcp-established %v: config.dump %s", tcp, data)
		}
		desc, err := readConfigDump(bytes.NewReader(data))
		if err != nil || desc.TCPEstablished != tcp {
			t.Errorf("tcp-established %v: read back %+v, %v", tcp, desc, err)
		}
	}
}

// The helper is asked for tcp-established as the caller says: a pod
// checkpoint, not a container's.
func TestDumpRequest(t *testing.T) {
	for _, tcp := range []bool{false, true} {
		r := dumpRequest("/run/berth/runc", "c1", "/var/lib/berth/checkpoints/c1-1", tcp)
		if r.Op != monitor.SpawnCheckpoint || r.Root != "/run/berth/runc" || r.ID != "c1" || r.WorkDir != "/var/lib/berth/checkpoints/c1-1" ||
			r.ImagesDir != "/var/lib/berth/checkpoints/c1-1/checkpoint" || r.TCPEstablished != tcp {
			t.Errorf("tcp-established %v: %+v", tcp, r)
		}
	}
}

func TestProbeCRIU(t *testing.T) {
	for _, tc := range []struct {
		name   string
		script string // the fake criu; "" is none on PATH
		want   string // a part of the reason; "" is CRIU works
	}{
		{"works", "#!/bin/sh\necho Looks good.\n", ""},
		{"check fails", "#!/bin/sh\necho 'Error (criu/vdso.c:381): vdso: Unexpected rt vDSO area bounds' >&2\necho 'Error (criu/crtools.c:260): Could not initialize kernel features detection.' >&2\nexit 1\n",
			"check: Error (criu/crtools.c:260): Could not initialize kernel features detection."},
		{"silent failure", "#!/bin/sh\nexit 3\n", "exit status 3"},
		{"missing", "", "criu not found on PATH"},
		{"no answer in time", "#!/bin/sh\nexec /bin/sleep 10\n", "no answer in 200ms"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fakeCRIU(t, tc.script)
			got, timedOut := probeCRIU(200 * time.Millisecond)
			if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
				t.Errorf("probeCRIU() = %q, want %q", got, tc.want)
			}
			// A check that ran out of time is asked again, not kept.
			if want := strings.HasPrefix(tc.name, "no answer"); timedOut != want {
				t.Errorf("probeCRIU() timed out: %v, want %v", timedOut, want)
			}
		})
	}
}

// A berth killed in the middle of a dump leaves its work directory (CRIU's
// images, perhaps gigabytes) under <root>/checkpoints; the next start
// removes it, and keeps the directory itself.
func TestSweepCheckpoints(t *testing.T) {
	root := t.TempDir()
	stale := filepath.Join(root, "checkpoints", "0123abcd-42")
	if err := os.MkdirAll(filepath.Join(stale, "images"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(stale, "images", "pages-1.img"), []byte("dump"), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := New(context.Background(), Options{Root: root, State: t.TempDir(), Pods: noPods{}, Images: noImages{}, Host: spec.SystemHost{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("stale checkpoint work directory %s: %v, want it removed", stale, err)
	}
	if fi, err := os.Stat(filepath.Join(root, "checkpoints")); err != nil || !fi.IsDir() {
		t.Errorf("checkpoints directory: %v, want it kept", err)
	}
}

// A restore is told what the dump was made with, from config.dump.
func TestWriteRestoreOptions(t *testing.T) {
	for _, tcp := range []bool{false, true} {
		dir := t.TempDir()
		if err := writeRestoreOptions(dir, &checkpointConfig{TCPEstablished: tcp}); err != nil {
			t.Fatal(err)
		}
		data, err := os.ReadFile(filepath.Join(dir, monitor.RestoreOptionsFile))
		var ro monitor.RestoreOptions
		if err != nil || json.Unmarshal(data, &ro) != nil || ro.TCPEstablished != tcp {
			t.Errorf("tcp-established %v: %s (%v)", tcp, data, err)
		}
	}
}

// A failed dump is told by CRIU's first error, the cause, and its last.
func TestLogTail(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct{ log, want string }{
		{"", ""},
		{"(00.01) Dumping\n(00.02) Error (criu/cr-dump.c:2053): Dumping FAILED.\n", "(00.02) Error (criu/cr-dump.c:2053): Dumping FAILED."},
		{"(00.01) Error (criu/sk-inet.c:191): inet: Connected TCP socket, consider using --tcp-established option.\n" +
			"(00.02) Error (criu/cr-dump.c:1669): Dump files (pid: 1) failed with -1\n(00.03) Unfreezing\n" +
			"(00.04) Error (criu/cr-dump.c:2053): Dumping FAILED.\n",
			"(00.01) Error (criu/sk-inet.c:191): inet: Connected TCP socket, consider using --tcp-established option. ... (00.04) Error (criu/cr-dump.c:2053): Dumping FAILED."},
	} {
		p := filepath.Join(dir, "dump.log")
		if err := os.WriteFile(p, []byte(tc.log), 0o600); err != nil {
			t.Fatal(err)
		}
		if got := logTail(p); got != tc.want {
			t.Errorf("logTail of %q = %q, want %q", tc.log, got, tc.want)
		}
	}
	if got := logTail(filepath.Join(dir, "missing.log")); got != "" {
		t.Errorf("logTail of no log = %q", got)
	}
}

// fakeCRIU makes script the only criu on an otherwise empty PATH; with
// an empty script there is no criu at all.
func fakeCRIU(t *testing.T, script string) {
	t.Helper()
	dir := t.TempDir()
	if script != "" {
		if err := os.WriteFile(filepath.Join(dir, "criu"), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("PATH", dir)
}
