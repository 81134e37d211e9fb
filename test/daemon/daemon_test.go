// Package daemon tests the berth daemon itself through its real socket:
// start-up, configuration, the foundational CRI calls, shutdown, metrics.
package daemon

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/internal/cgroup"
	"github.com/berth-runtime/berth/internal/config"
	"github.com/berth-runtime/berth/test/framework"
)

func TestMain(m *testing.M) { framework.Main(m) }

func TestSocketPermissions(t *testing.T) {
	framework.RequireRoot(t)
	t.Parallel()
	tests := []struct {
		name    string
		args    []string
		wantGID uint32
	}{
		{name: "default group root", wantGID: 0},
		{name: "numeric socket group", args: []string{"--socket-group", "4242"}, wantGID: 4242},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			d := framework.StartDaemon(t, framework.WithArgs(tt.args...))
			fi, err := os.Lstat(d.Socket)
			if err != nil {
				t.Fatal(err)
			}
			if fi.Mode().Type() != os.ModeSocket || fi.Mode().Perm() != 0o660 {
				t.Errorf("socket mode = %v, want a socket with 0660", fi.Mode())
			}
			st := fi.Sys().(*syscall.Stat_t)
			if st.Uid != 0 || st.Gid != tt.wantGID {
				t.Errorf("socket owner = %d:%d, want 0:%d", st.Uid, st.Gid, tt.wantGID)
			}
			for _, dir := range []string{d.Root, d.State} {
				if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o711 {
					t.Errorf("%s: mode %v (%v), want 0711", dir, fi.Mode(), err)
				}
			}
		})
	}
}

func TestSecondDaemonRefused(t *testing.T) {
	t.Parallel()
	d := framework.StartDaemon(t)
	other := framework.TempDir(t)
	tests := []struct {
		name string
		args []string
		want string
	}{
		{
			name: "same socket",
			args: []string{"--address", d.Socket, "--root", filepath.Join(other, "root"), "--state", filepath.Join(other, "state")},
			want: "another berth is already serving " + d.Socket,
		},
		{
			name: "same state dir",
			args: []string{"--address", filepath.Join(other, "b.sock"), "--root", d.Root, "--state", d.State},
			want: "another berth is already using state dir " + d.State,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := framework.RunBerth(t, append([]string{"--config", filepath.Join(d.Dir, "config.toml"), "--cni-conf-dir", d.CNIConfDir}, tt.args...)...)
			if res.ExitCode == 0 || !strings.Contains(res.Stderr, tt.want) {
				t.Errorf("second berth: exit %d, stderr %q; want failure with %q", res.ExitCode, res.Stderr, tt.want)
			}
			if n := len(nonEmptyLines(res.Stderr)); n != 1 {
				t.Errorf("second berth wrote %d lines, want 1: %q", n, res.Stderr)
			}
			if _, err := d.Runtime.Version(framework.Ctx(t), &runtimeapi.VersionRequest{}); err != nil {
				t.Errorf("first berth stopped answering: %v", err)
			}
			if fi, err := os.Lstat(d.Socket); err != nil || fi.Mode().Type() != os.ModeSocket {
				t.Errorf("first berth's socket is gone: %v", err)
			}
		})
	}
}

func TestStaleSocketReplaced(t *testing.T) {
	t.Parallel()
	sock := filepath.Join(framework.TempDir(t), "stale.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	// As after a crash: the file stays, nobody listens.
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	l.Close()
	if _, err := net.Dial("unix", sock); err == nil {
		t.Fatal("stale socket still answers")
	}

	d := framework.StartDaemon(t, framework.WithSocket(sock))
	if _, err := d.Runtime.Version(framework.Ctx(t), &runtimeapi.VersionRequest{}); err != nil {
		t.Fatal(err)
	}
}

func TestNonSocketAtAddressRefused(t *testing.T) {
	t.Parallel()
	dir := framework.TempDir(t)
	path := filepath.Join(dir, "berth.sock")
	if err := os.WriteFile(path, []byte("precious"), 0o644); err != nil {
		t.Fatal(err)
	}
	res := framework.RunBerth(t, daemonArgs(t, dir, "--address", path)...)
	if res.ExitCode == 0 || !strings.Contains(res.Stderr, "is not a socket") {
		t.Errorf("exit %d, stderr %q; want a refusal", res.ExitCode, res.Stderr)
	}
	if b, err := os.ReadFile(path); err != nil || string(b) != "precious" {
		t.Errorf("the file at the socket path was touched: %q, %v", b, err)
	}
}

func TestKilledDaemonRestarts(t *testing.T) {
	t.Parallel()
	d := framework.StartDaemon(t)
	d.Kill()
	if _, err := os.Lstat(d.Socket); err != nil {
		t.Fatalf("a killed daemon should leave its socket behind: %v", err)
	}
	d.Restart() // replaces the stale socket; the kernel released the lock
	if _, err := d.Runtime.Version(framework.Ctx(t), &runtimeapi.VersionRequest{}); err != nil {
		t.Fatal(err)
	}
}

// daemonArgs are arguments for a daemon entirely inside dir, with an empty
// config file, followed by extra.
func daemonArgs(t *testing.T, dir string, extra ...string) []string {
	t.Helper()
	empty := filepath.Join(dir, "empty.toml")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{
		"--config", empty,
		"--address", filepath.Join(dir, "berth.sock"),
		"--root", filepath.Join(dir, "root"),
		"--state", filepath.Join(dir, "state"),
		"--cni-conf-dir", filepath.Join(dir, "net.d"),
	}
	return append(args, extra...)
}

func TestBadConfigStopsStartup(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		config string // written to the config file; "" means no file at all
		args   []string
		want   string // the one stderr line must contain this
	}{
		{name: "unknown key", config: "[cni]\nconfdir = \"/x\"\n", want: `unknown key "cni.confdir"`},
		{name: "unknown top-level key", config: "adress = \"/x\"\n", want: `unknown key "adress"`},
		{name: "bad value", config: "cgroup_driver = \"foo\"\n", want: `invalid cgroup_driver "foo": want cgroupfs or systemd`},
		{name: "bad type", config: "log_level = 3\n", want: `wrong type for key "log_level": want a string, got the integer 3`},
		{name: "bad list type", config: "[cni]\nbin_dirs = \"/opt/cni/bin\"\n", want: `wrong type for key "cni.bin_dirs"`},
		{name: "syntax error", config: "address = \n", want: "line 1"},
		{name: "bad flag value", config: "# empty\n", args: []string{"--log-format", "xml"}, want: `invalid --log-format "xml": want text or json`},
		{name: "relative path flag", config: "# empty\n", args: []string{"--root", "var/lib/berth"}, want: `invalid --root "var/lib/berth": want an absolute path`},
		{name: "unknown flag", config: "# empty\n", args: []string{"--cni-confdir", "/x"}, want: "flag provided but not defined: -cni-confdir"},
		{name: "missing explicit config", want: "no such file or directory"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := framework.TempDir(t)
			cfg := filepath.Join(dir, "config.toml")
			if tt.config != "" {
				if err := os.WriteFile(cfg, []byte(tt.config), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			args := append(daemonArgs(t, dir, "--config", cfg), tt.args...)
			res := framework.RunBerth(t, args...)
			if res.ExitCode == 0 {
				t.Fatalf("berth started with a bad config; stderr %q", res.Stderr)
			}
			lines := nonEmptyLines(res.Stderr)
			if len(lines) != 1 || !strings.Contains(lines[0], tt.want) {
				t.Errorf("stderr = %q, want one line containing %q", res.Stderr, tt.want)
			}
			if tt.config != "" && !strings.Contains(lines[0], "--") && !strings.Contains(lines[0], cfg) {
				t.Errorf("error %q does not name the config file %s", lines[0], cfg)
			}
			if _, err := os.Lstat(filepath.Join(dir, "berth.sock")); err == nil {
				t.Error("a socket was created despite the bad config")
			}
		})
	}
}

func TestVersionFlag(t *testing.T) {
	t.Parallel()
	res := framework.RunBerth(t, "--version")
	// The framework's build carries go build's VCS stamp: the commit is a
	// full sha (with -dirty from a modified checkout) or, outside git,
	// "unknown".
	m := regexp.MustCompile(`^berth version (\S+)\ncommit ([0-9a-f]{40}(-dirty)?|unknown)\ngo go\S+ linux/\w+\n$`).FindStringSubmatch(res.Stdout)
	if res.ExitCode != 0 || m == nil {
		t.Fatalf("berth --version: exit %d, stdout %q, stderr %q", res.ExitCode, res.Stdout, res.Stderr)
	}
	d := framework.StartDaemon(t)
	v, err := d.Runtime.Version(framework.Ctx(t), &runtimeapi.VersionRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if v.RuntimeVersion != m[1] {
		t.Errorf("Version RPC says %q, --version says %q", v.RuntimeVersion, m[1])
	}
}

// TestNotifyReady runs berth as a Type=notify unit would: it must send
// READY=1 to the socket named by NOTIFY_SOCKET once it serves CRI.
func TestNotifyReady(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "notify")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	framework.StartDaemon(t, framework.WithEnv("NOTIFY_SOCKET="+path))
	if err := conn.SetReadDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 256)
	n, err := conn.Read(buf)
	if err != nil || string(buf[:n]) != "READY=1" {
		t.Fatalf("from NOTIFY_SOCKET: %q, %v; want READY=1", buf[:n], err)
	}
}

func TestConfigDefault(t *testing.T) {
	t.Parallel()
	res := framework.RunBerth(t, "config", "default")
	if res.ExitCode != 0 || res.Stderr != "" {
		t.Fatalf("berth config default: exit %d, stderr %q", res.ExitCode, res.Stderr)
	}
	got, err := config.Parse(res.Stdout)
	if err != nil {
		t.Fatalf("parse the default config: %v\n%s", err, res.Stdout)
	}
	if !reflect.DeepEqual(got, config.Default()) {
		t.Errorf("the default config parses to %+v, want %+v", got, config.Default())
	}
	for _, key := range []string{"address", "root", "state", "cgroup_driver", "log_level", "log_format", "metrics_address", "socket_group", "[cni]", "conf_dir", "bin_dirs"} {
		if !regexp.MustCompile(`(?m)^#.*\n` + regexp.QuoteMeta(key)).MatchString(res.Stdout) {
			t.Errorf("key %s missing or without a comment above it", key)
		}
	}
	// The daemon itself accepts it (the framework's flags override the paths).
	d := framework.StartDaemon(t, framework.WithConfig(res.Stdout))
	if _, err := d.Runtime.Status(framework.Ctx(t), &runtimeapi.StatusRequest{}); err != nil {
		t.Fatal(err)
	}

	if res := framework.RunBerth(t, "config", "nonsense"); res.ExitCode == 0 {
		t.Error("berth config nonsense succeeded")
	}
}

func TestVersion(t *testing.T) {
	t.Parallel()
	d := framework.StartDaemon(t)
	v, err := d.Runtime.Version(framework.Ctx(t), &runtimeapi.VersionRequest{Version: "v1"})
	if err != nil {
		t.Fatal(err)
	}
	if v.RuntimeName != "berth" || v.RuntimeApiVersion != "v1" || v.Version != "0.1.0" || v.RuntimeVersion == "" {
		t.Errorf("Version = %v", v)
	}
}

func TestRuntimeConfigCgroupDriver(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		opts    []framework.Option
		want    runtimeapi.CgroupDriver
		systemd bool // berth starts with the systemd driver only where systemd answers
	}{
		{name: "default", want: runtimeapi.CgroupDriver_CGROUPFS},
		{name: "systemd in config", opts: []framework.Option{framework.WithConfig(`cgroup_driver = "systemd"`)}, want: runtimeapi.CgroupDriver_SYSTEMD, systemd: true},
		{name: "flag over config", opts: []framework.Option{
			framework.WithConfig(`cgroup_driver = "systemd"`), framework.WithArgs("--cgroup-driver", "cgroupfs"),
		}, want: runtimeapi.CgroupDriver_CGROUPFS},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if err := cgroup.Systemd.Check(framework.Ctx(t)); tt.systemd && err != nil {
				t.Skipf("needs systemd (test/cgroup checks that berth refuses to start without it): %v", err)
			}
			d := framework.StartDaemon(t, tt.opts...)
			resp, err := d.Runtime.RuntimeConfig(framework.Ctx(t), &runtimeapi.RuntimeConfigRequest{})
			if err != nil {
				t.Fatal(err)
			}
			// A missing linux block or field would read as SYSTEMD too: check
			// the block is there, not just the getter's value.
			if resp.Linux == nil || resp.Linux.CgroupDriver != tt.want {
				t.Errorf("RuntimeConfig = %v, want linux.cgroup_driver %s", resp, tt.want)
			}
		})
	}
}

func TestStatusNetworkReady(t *testing.T) {
	t.Parallel()
	framework.CNIBinDir(t) // libcni checks that the conflist's plugins exist
	d := framework.StartDaemon(t)
	ctx := framework.Ctx(t)

	conds := func(verbose bool) (map[string]*runtimeapi.RuntimeCondition, map[string]string) {
		t.Helper()
		resp, err := d.Runtime.Status(ctx, &runtimeapi.StatusRequest{Verbose: verbose})
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]*runtimeapi.RuntimeCondition{}
		for _, c := range resp.GetStatus().GetConditions() {
			m[c.Type] = c
		}
		return m, resp.Info
	}

	c, info := conds(false)
	if !c[runtimeapi.RuntimeReady].GetStatus() {
		t.Errorf("RuntimeReady = %v, want true", c[runtimeapi.RuntimeReady])
	}
	net := c[runtimeapi.NetworkReady]
	if net == nil || net.Status || net.Reason != "NetworkPluginNotReady" || !strings.Contains(net.Message, d.CNIConfDir) {
		t.Errorf("NetworkReady with an empty conf dir = %v, want false, NetworkPluginNotReady, naming %s", net, d.CNIConfDir)
	}
	if len(info) != 0 {
		t.Errorf("non-verbose Status has info %v", info)
	}

	conflist := `{"cniVersion": "1.0.0", "name": "test", "plugins": [{"type": "loopback"}]}`
	if err := os.WriteFile(filepath.Join(d.CNIConfDir, "10-test.conflist"), []byte(conflist), 0o644); err != nil {
		t.Fatal(err)
	}
	c, info = conds(true)
	if net := c[runtimeapi.NetworkReady]; !net.GetStatus() {
		t.Errorf("NetworkReady with a conflist = %v, want true", net)
	}
	var cfg map[string]any
	if err := json.Unmarshal([]byte(info["config"]), &cfg); err != nil {
		t.Fatalf("verbose info[config] = %q: %v", info["config"], err)
	}
	if cni, _ := cfg["cni"].(map[string]any); cni["conf_dir"] != d.CNIConfDir || cfg["address"] != d.Socket {
		t.Errorf("verbose info[config] = %s, want the effective config", info["config"])
	}
}

// TestUnimplementedRPC: a method of a CRI newer than berth's answers
// Unimplemented, which is what the kubelet looks for to fall back.
func TestUnimplementedRPC(t *testing.T) {
	t.Parallel()
	d := framework.StartDaemon(t)
	ctx := framework.Ctx(t)
	err := d.Conn.Invoke(ctx, "/runtime.v1.RuntimeService/FromANewerCRI", &runtimeapi.VersionRequest{}, &runtimeapi.VersionResponse{})
	if status.Code(err) != codes.Unimplemented {
		t.Errorf("an unknown method: %v, want Unimplemented", err)
	}
}

func TestSIGTERM(t *testing.T) {
	t.Parallel()
	d := framework.StartDaemon(t)
	if err := d.Stop(); err != nil {
		t.Fatalf("berth did not exit cleanly on SIGTERM: %v", err)
	}
	if code := d.ExitCode(); code != 0 {
		t.Errorf("exit code %d, want 0", code)
	}
	if _, err := os.Lstat(d.Socket); !os.IsNotExist(err) {
		t.Errorf("socket still there after SIGTERM: %v", err)
	}
	d.Restart() // the state lock was released
}

func TestMetrics(t *testing.T) {
	t.Parallel()
	addr := framework.FreeTCPAddr(t)
	d := framework.StartDaemon(t, framework.WithArgs("--metrics-address", addr))
	ctx := framework.Ctx(t)
	if _, err := d.Runtime.RuntimeConfig(ctx, &runtimeapi.RuntimeConfigRequest{}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Runtime.ContainerStatus(ctx, &runtimeapi.ContainerStatusRequest{ContainerId: "gone"}); status.Code(err) != codes.NotFound {
		t.Fatalf("ContainerStatus of an unknown container: %v, want NotFound", err)
	}

	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	text := string(body)
	for series, want := range map[string]float64{
		`berth_cri_requests_total{code="OK",method="RuntimeConfig",service="RuntimeService"}`:         1,
		`berth_cri_requests_total{code="NotFound",method="ContainerStatus",service="RuntimeService"}`: 1,
		`berth_cri_request_duration_seconds_count{method="RuntimeConfig",service="RuntimeService"}`:   1,
	} {
		if got, ok := sample(text, series); !ok || got != want {
			t.Errorf("%s = %v (present %v), want %v", series, got, ok, want)
		}
	}
	if !strings.Contains(text, "go_goroutines") {
		t.Error("no Go runtime metrics")
	}
}

// sample finds one series' value in the Prometheus text format.
func sample(text, series string) (float64, bool) {
	for _, line := range strings.Split(text, "\n") {
		if rest, ok := strings.CutPrefix(line, series+" "); ok {
			v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			return v, err == nil
		}
	}
	return 0, false
}

func TestPanicBecomesInternal(t *testing.T) {
	t.Parallel()
	d := framework.StartDaemon(t, framework.WithEnv("BERTH_DEBUG_PANIC_METHOD=ListContainers"))
	ctx := framework.Ctx(t)
	_, err := d.Runtime.ListContainers(ctx, &runtimeapi.ListContainersRequest{})
	if status.Code(err) != codes.Internal {
		t.Fatalf("ListContainers: %v, want Internal", err)
	}
	if _, err := d.Runtime.Version(ctx, &runtimeapi.VersionRequest{}); err != nil {
		t.Fatalf("daemon not serving after a panic: %v", err)
	}
	log, err := os.ReadFile(d.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(log), "panic in CRI handler") || !strings.Contains(string(log), "goroutine") {
		t.Errorf("no panic log with a stack in:\n%s", log)
	}
}

func nonEmptyLines(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.TrimSpace(l) != "" {
			out = append(out, l)
		}
	}
	return out
}
