package security_test

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/test/framework"
)

// env is one berth on a pod network of its own with busybox pulled.
type env struct {
	*framework.PodEnv
	t   *testing.T
	reg string
}

func newEnv(t *testing.T, opts ...framework.Option) *env {
	t.Helper()
	e := framework.NewPodEnvWith(t, "berth-security", opts...)
	return &env{PodEnv: e, t: t, reg: framework.TestRegistry(t)}
}

// ctr is a container config running cmd (sleep by default) from image
// (busybox by default).
func (e *env) ctr(name, image string, cmd ...string) *runtimeapi.ContainerConfig {
	if image == "" {
		image = e.Image
	}
	if len(cmd) == 0 {
		cmd = []string{"sleep", "100000"}
	}
	return &runtimeapi.ContainerConfig{
		Metadata: &runtimeapi.ContainerMetadata{Name: name},
		Image:    &runtimeapi.ImageSpec{Image: image},
		Command:  cmd,
		LogPath:  name + ".log",
	}
}

// start creates and starts cfg in pod and returns the error instead of
// failing: for a hostile config, a refusal is a result.
func (e *env) start(pod string, podCfg *runtimeapi.PodSandboxConfig, cfg *runtimeapi.ContainerConfig) (string, error) {
	e.t.Helper()
	resp, err := e.D.Runtime.CreateContainer(framework.Ctx(e.t), &runtimeapi.CreateContainerRequest{PodSandboxId: pod, Config: cfg, SandboxConfig: podCfg})
	if err != nil {
		return "", fmt.Errorf("create: %w", err)
	}
	if _, err := e.D.Runtime.StartContainer(framework.Ctx(e.t), &runtimeapi.StartContainerRequest{ContainerId: resp.ContainerId}); err != nil {
		return resp.ContainerId, fmt.Errorf("start: %w", err)
	}
	return resp.ContainerId, nil
}

// mustStart is start for a config that must run.
func (e *env) mustStart(pod string, podCfg *runtimeapi.PodSandboxConfig, cfg *runtimeapi.ContainerConfig) string {
	e.t.Helper()
	id, err := e.start(pod, podCfg, cfg)
	if err != nil {
		e.t.Fatalf("container %s: %v", cfg.GetMetadata().GetName(), err)
	}
	return id
}

// remove stops and removes a container, ignoring a missing one.
func (e *env) remove(id string) {
	e.t.Helper()
	if id == "" {
		return
	}
	ctx := framework.Ctx(e.t)
	e.D.Runtime.StopContainer(ctx, &runtimeapi.StopContainerRequest{ContainerId: id})
	if _, err := e.D.Runtime.RemoveContainer(ctx, &runtimeapi.RemoveContainerRequest{ContainerId: id}); err != nil {
		e.t.Errorf("remove container %s: %v", id, err)
	}
}

// exec runs a shell script in a container and returns its output and
// exit code.
func (e *env) exec(id, script string) (stdout, stderr string, code int32) {
	e.t.Helper()
	resp, err := e.D.Runtime.ExecSync(framework.Ctx(e.t), &runtimeapi.ExecSyncRequest{ContainerId: id, Cmd: []string{"sh", "-c", script}, Timeout: 25})
	if err != nil {
		e.t.Fatalf("exec %q in %s: %v", script, id, err)
	}
	return string(resp.Stdout), string(resp.Stderr), resp.ExitCode
}

// sh runs a script that must succeed and returns its stdout, trimmed.
func (e *env) sh(id, script string) string {
	e.t.Helper()
	out, errOut, code := e.exec(id, script)
	if code != 0 {
		e.t.Fatalf("%q in %s exited %d: %s%s", script, id, code, out, errOut)
	}
	return strings.TrimSpace(out)
}

// wantCode fails unless err is a gRPC error of code whose message holds
// every one of words: a refusal must say what was refused.
func wantCode(t *testing.T, err error, code codes.Code, words ...string) {
	t.Helper()
	if err == nil {
		t.Errorf("accepted; want %s", code)
		return
	}
	st, _ := status.FromError(errors.Unwrap(err))
	if st == nil {
		st, _ = status.FromError(err)
	}
	if st.Code() != code {
		t.Errorf("got %v; want code %s", err, code)
		return
	}
	for _, w := range words {
		if !strings.Contains(st.Message(), w) {
			t.Errorf("error %q does not name %q", st.Message(), w)
		}
	}
}

// grpcCode is the gRPC code of err (wrapped by start or not).
func grpcCode(err error) codes.Code {
	for e := err; e != nil; e = errors.Unwrap(e) {
		if st, ok := status.FromError(e); ok {
			return st.Code()
		}
	}
	return status.Code(err)
}

// --- images ---

// entry is one tar entry of a hand-made layer; names and links are
// written exactly as given, which is the point.
type entry struct {
	name, link, body   string
	typ                byte
	mode               int64
	uid, gid           int
	xattrs             map[string]string
	devmajor, devminor int64
}

func file(name, body string) entry {
	return entry{name: name, typ: tar.TypeReg, body: body, mode: 0o644}
}
func dir(name string) entry { return entry{name: name, typ: tar.TypeDir, mode: 0o755} }
func symlink(name, to string) entry {
	return entry{name: name, typ: tar.TypeSymlink, link: to, mode: 0o777}
}
func hardlink(name, to string) entry {
	return entry{name: name, typ: tar.TypeLink, link: to, mode: 0o644}
}

// tarBytes is the uncompressed tar of the entries, in order.
func tarBytes(t testing.TB, entries ...entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		hdr := &tar.Header{Name: e.name, Typeflag: e.typ, Linkname: e.link, Mode: e.mode, Uid: e.uid, Gid: e.gid,
			Devmajor: e.devmajor, Devminor: e.devminor, ModTime: time.Unix(1700000000, 0), Format: tar.FormatPAX}
		if e.typ == tar.TypeReg {
			hdr.Size = int64(len(e.body))
		}
		if len(e.xattrs) > 0 {
			hdr.PAXRecords = map[string]string{}
			for k, v := range e.xattrs {
				hdr.PAXRecords["SCHILY.xattr."+k] = v
			}
		}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatalf("tar header %q: %v", e.name, err)
		}
		if _, err := io.WriteString(tw, e.body); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// layer is a gzipped layer of the entries.
func layer(t testing.TB, entries ...entry) v1.Layer {
	t.Helper()
	b := tarBytes(t, entries...)
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil },
		tarball.WithCompressedCaching)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// remoteImage fetches ref from a registry, as a base to build on.
func remoteImage(t testing.TB, ref string) v1.Image {
	t.Helper()
	n, err := name.ParseReference(ref, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	img, err := remote.Image(n, remote.WithContext(context.Background()))
	if err != nil {
		t.Fatalf("fetch %s: %v", ref, err)
	}
	return img
}

// image is base (nil: empty) plus layers, its config changed by tweak.
func image(t testing.TB, base v1.Image, tweak func(*v1.Config), layers ...v1.Layer) v1.Image {
	t.Helper()
	if base == nil {
		base = empty.Image
	}
	img, err := mutate.AppendLayers(base, layers...)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", "amd64"
	if len(cf.Config.Cmd) == 0 && len(cf.Config.Entrypoint) == 0 {
		cf.Config.Cmd = []string{"/bin/sh"}
	}
	if tweak != nil {
		tweak(&cf.Config)
	}
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		t.Fatal(err)
	}
	return img
}

// push pushes img to the test registry under a fresh tag of repo and
// returns the reference.
func (e *env) push(repo string, img v1.Image) string {
	e.t.Helper()
	ref := fmt.Sprintf("%s/berth-security/%s:%s", e.reg, repo, framework.RandHex(4))
	n, err := name.ParseReference(ref, name.Insecure)
	if err != nil {
		e.t.Fatal(err)
	}
	if err := remote.Write(n, img, remote.WithContext(e.t.Context())); err != nil {
		e.t.Fatalf("push %s: %v", ref, err)
	}
	return ref
}

// busybox is the test registry's busybox, to build images on.
func (e *env) busybox() v1.Image { return remoteImage(e.t, e.Image) }

// pull pulls ref through the CRI.
func (e *env) pull(ref string) error {
	_, err := e.D.Image.PullImage(framework.Ctx(e.t), &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: ref}})
	return err
}

func (e *env) mustPull(ref string) {
	e.t.Helper()
	if err := e.pull(ref); err != nil {
		e.t.Fatalf("pull %s: %v", ref, err)
	}
}

// --- the host ---

// victimDir is a host directory with a file of known content, for an
// attack to aim at; check tells whether anything below it changed.
type victimDir struct {
	Dir    string
	before map[string]string
}

func newVictim(t *testing.T) *victimDir {
	t.Helper()
	d := framework.TempDir(t)
	for p, body := range map[string]string{"victim": "victim\n", "sub/victim": "victim\n"} {
		os.MkdirAll(filepath.Join(d, filepath.Dir(p)), 0o755)
		if err := os.WriteFile(filepath.Join(d, p), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return &victimDir{Dir: d, before: snapshot(d)}
}

func (v *victimDir) check(t *testing.T) {
	t.Helper()
	after := snapshot(v.Dir)
	for p, a := range after {
		if b, ok := v.before[p]; !ok {
			t.Errorf("host %s appeared: %s", p, a)
		} else if a != b {
			t.Errorf("host %s changed: %s, was %s", p, a, b)
		}
	}
	for p := range v.before {
		if _, ok := after[p]; !ok {
			t.Errorf("host %s disappeared", p)
		}
	}
}

// snapshot describes every file under root: type, mode, owner, times,
// link count, and a hash of the content or the link's target.
func snapshot(root string) map[string]string {
	out := map[string]string{}
	filepath.WalkDir(root, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			out[p] = "error: " + err.Error()
			return nil
		}
		out[p] = describe(p)
		return nil
	})
	return out
}

func describe(p string) string {
	fi, err := os.Lstat(p)
	if err != nil {
		return "error: " + err.Error()
	}
	st := fi.Sys().(*syscall.Stat_t)
	d := fmt.Sprintf("%s %d:%d nlink %d mtime %d size %d", fi.Mode(), st.Uid, st.Gid, st.Nlink, st.Mtim.Nano(), fi.Size())
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		target, _ := os.Readlink(p)
		d += " -> " + target
	case fi.Mode().IsRegular():
		b, _ := os.ReadFile(p)
		d += fmt.Sprintf(" sha256 %x", sha256.Sum256(b))
	}
	if n, err := syscall.Listxattr(p, make([]byte, 4096)); err == nil && n > 0 {
		d += fmt.Sprintf(" xattrs %d", n)
	}
	return d
}

// fileHash is the sha256 of a host file.
func fileHash(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("%x", sha256.Sum256(b))
}

// procStatusKB reads a "VmHWM:"-like field of /proc/PID/status, in KiB.
func procStatusKB(t *testing.T, pid int, field string) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return n
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}

// resetPeak makes VmHWM start over from the current RSS (Linux 4.0+),
// so a test measures its own peak and not the daemon's start-up.
func resetPeak(t *testing.T, pid int) {
	t.Helper()
	if err := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0o200); err != nil {
		t.Fatalf("reset the peak RSS of %d: %v", pid, err)
	}
}

// fdCount is the number of open descriptors of a process.
func fdCount(t *testing.T, pid int) int {
	t.Helper()
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatal(err)
	}
	return len(fds)
}

// threadCount is the number of threads of a process: a Go daemon's
// leaked goroutines blocked in syscalls, or its leaked timers' threads,
// show here before they show as memory.
func threadCount(t *testing.T, pid int) int {
	t.Helper()
	return int(procStatusKB(t, pid, "Threads"))
}

// buildAttacker builds testdata/attacker as a static binary.
func buildAttacker(t *testing.T) []byte {
	t.Helper()
	out := filepath.Join(t.TempDir(), "attacker")
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", out, "./testdata/attacker")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build the attacker: %v\n%s", err, b)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// ctrInfo is the part of ContainerStatus's verbose info the tests read.
type ctrInfo struct {
	Pid         int    `json:"pid"`
	Rootfs      string `json:"rootfs"`
	RuntimeSpec struct {
		Annotations map[string]string `json:"annotations"`
		Process     struct {
			Env []string `json:"env"`
		} `json:"process"`
	} `json:"runtimeSpec"`
}

func (e *env) info(id string) ctrInfo {
	e.t.Helper()
	resp, err := e.D.Runtime.ContainerStatus(framework.Ctx(e.t), &runtimeapi.ContainerStatusRequest{ContainerId: id, Verbose: true})
	if err != nil {
		e.t.Fatal(err)
	}
	var info ctrInfo
	if err := json.Unmarshal([]byte(resp.Info["info"]), &info); err != nil {
		e.t.Fatalf("container %s verbose info %q: %v", id, resp.Info["info"], err)
	}
	return info
}

func newSHA() hash.Hash { return sha256.New() }

// tarballLayer is a gzipped layer of raw tar bytes.
func tarballLayer(b []byte) (v1.Layer, error) {
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil },
		tarball.WithCompressedCaching)
}
