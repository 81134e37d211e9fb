package sandbox

import (
	"errors"
	"net"
	"strings"
	"testing"

	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/berth-runtime/berth/internal/cgroup"
)

// Where pause goes (the translation itself is internal/cgroup's): the
// pod's parent or the driver's default, and, for a recorded pod, what its
// record names.
func TestPauseCgroup(t *testing.T) {
	pod := func(parent string) *runtimeapi.PodSandboxConfig {
		return &runtimeapi.PodSandboxConfig{Linux: &runtimeapi.LinuxPodSandboxConfig{CgroupParent: parent}}
	}
	tests := []struct {
		name     string
		driver   cgroup.Driver
		rec      Record
		cfg      *runtimeapi.PodSandboxConfig
		want     string // pause's cgroup path
		wantSpec string
		wantErr  string
	}{
		{name: "cgroupfs parent", driver: cgroup.Cgroupfs, rec: Record{ID: "ID"}, cfg: pod("/kubepods/pod1"),
			want: "/kubepods/pod1/ID", wantSpec: "/kubepods/pod1/ID"},
		{name: "cgroupfs default", driver: cgroup.Cgroupfs, rec: Record{ID: "ID"}, cfg: pod(""),
			want: "/berth/ID", wantSpec: "/berth/ID"},
		{name: "cgroupfs no config", driver: cgroup.Cgroupfs, rec: Record{ID: "ID"},
			want: "/berth/ID", wantSpec: "/berth/ID"},
		{name: "systemd slice", driver: cgroup.Systemd, rec: Record{ID: "ID"}, cfg: pod("kubepods-besteffort-pod1.slice"),
			want: "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod1.slice/berth-ID.scope", wantSpec: "kubepods-besteffort-pod1.slice:berth:ID"},
		{name: "systemd default", driver: cgroup.Systemd, rec: Record{ID: "ID"}, cfg: pod(""),
			want: "/berth.slice/berth-ID.scope", wantSpec: "berth.slice:berth:ID"},
		{name: "systemd with a path", driver: cgroup.Systemd, rec: Record{ID: "ID"}, cfg: pod("/kubepods/pod1"), wantErr: "slice"},
		{name: "cgroupfs with a slice", driver: cgroup.Cgroupfs, rec: Record{ID: "ID"}, cfg: pod("kubepods.slice"), wantErr: "absolute"},
		{name: "the record wins", driver: cgroup.Systemd, rec: Record{ID: "ID", Cgroup: "kubepods-pod2.slice:berth:ID"}, cfg: pod("kubepods-pod1.slice"),
			want: "/kubepods.slice/kubepods-pod2.slice/berth-ID.scope", wantSpec: "kubepods-pod2.slice:berth:ID"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			def, err := tt.driver.Parent("")
			if err != nil {
				t.Fatal(err)
			}
			m := &Manager{cgroups: tt.driver, defaultParent: def}
			cg, err := m.pauseCgroup(&tt.rec, tt.cfg)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || cg.Path() != tt.want || cg.SpecPath() != tt.wantSpec {
				t.Fatalf("= %q (%q), %v; want %q (%q)", cg.Path(), cg.SpecPath(), err, tt.want, tt.wantSpec)
			}
		})
	}
}

func TestCheckSysctls(t *testing.T) {
	tests := []struct {
		name             string
		sysctls          map[string]string
		hostNet, hostIPC bool
		wantErr          string
	}{
		{name: "net and ipc", sysctls: map[string]string{"net.ipv4.ip_unprivileged_port_start": "0", "kernel.shmmax": "1000", "kernel.sem": "1 2 3 4", "fs.mqueue.msg_max": "10"}},
		{name: "slash form", sysctls: map[string]string{"net/ipv4/conf/eth0.1/forwarding": "1"}},
		{name: "not namespaced", sysctls: map[string]string{"vm.swappiness": "1"}, wantErr: "not namespaced"},
		{name: "kernel.hostname", sysctls: map[string]string{"kernel.hostname": "x"}, wantErr: "not namespaced"},
		{name: "net on host network", sysctls: map[string]string{"net.ipv4.ip_forward": "1"}, hostNet: true, wantErr: "network namespace"},
		{name: "ipc on host ipc", sysctls: map[string]string{"kernel.msgmax": "1"}, hostIPC: true, wantErr: "IPC namespace"},
		{name: "dot dot", sysctls: map[string]string{"net/../../vm/swappiness": "1"}, wantErr: "invalid"},
		{name: "newline value", sysctls: map[string]string{"net.ipv4.ip_forward": "1\n0"}, wantErr: "invalid"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := checkSysctls(tt.sysctls, tt.hostNet, tt.hostIPC)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("err = %v, want ErrInvalid with %q", err, tt.wantErr)
			}
		})
	}
}

func TestResolvAndHosts(t *testing.T) {
	got := string(resolvContent(&runtimeapi.DNSConfig{
		Servers: []string{"10.0.0.10", "10.0.0.11"}, Searches: []string{"ns.svc.cluster.local", "svc.cluster.local"}, Options: []string{"ndots:5"},
	}))
	want := "search ns.svc.cluster.local svc.cluster.local\nnameserver 10.0.0.10\nnameserver 10.0.0.11\noptions ndots:5\n"
	if got != want {
		t.Errorf("resolv.conf:\n%s\nwant:\n%s", got, want)
	}
	hosts := string(hostsContent("web-0", net.ParseIP("10.1.2.3")))
	if !strings.HasPrefix(hosts, "127.0.0.1\tlocalhost\n") || !strings.HasSuffix(hosts, "10.1.2.3\tweb-0\n") {
		t.Errorf("hosts:\n%s", hosts)
	}
	if strings.Contains(string(hostsContent("web-0", nil)), "web-0") {
		t.Error("hosts names the pod without an IP")
	}
}
