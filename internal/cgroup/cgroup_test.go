package cgroup

import (
	"context"
	"strings"
	"testing"

	"github.com/opencontainers/cgroups/systemd"
)

func TestParseDriver(t *testing.T) {
	for _, tt := range []struct {
		name    string
		want    Driver
		wantErr bool
	}{
		{name: "", want: Cgroupfs},
		{name: "cgroupfs", want: Cgroupfs},
		{name: "systemd", want: Systemd},
		{name: "Systemd", wantErr: true},
		{name: "nope", wantErr: true},
	} {
		got, err := ParseDriver(tt.name)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("ParseDriver(%q) = %q, %v; want %q (error %v)", tt.name, got, err, tt.want, tt.wantErr)
		}
	}
}

// The translation table: a pod's cgroup parent, as the kubelet gives it,
// to where pause (named by the pod's id) and its containers go.
func TestParentAndChild(t *testing.T) {
	tests := []struct {
		name           string
		driver         Driver
		parent         string
		wantParentPath string
		wantPath       string // of the child "ID"
		wantSpec       string
		wantErr        string
	}{
		{name: "cgroupfs pod", driver: Cgroupfs, parent: "/kubepods/besteffort/pod123",
			wantParentPath: "/kubepods/besteffort/pod123", wantPath: "/kubepods/besteffort/pod123/ID", wantSpec: "/kubepods/besteffort/pod123/ID"},
		{name: "cgroupfs trailing slash", driver: Cgroupfs, parent: "/kubepods/pod1/",
			wantParentPath: "/kubepods/pod1", wantPath: "/kubepods/pod1/ID", wantSpec: "/kubepods/pod1/ID"},
		{name: "cgroupfs default", driver: Cgroupfs, parent: "",
			wantParentPath: "/berth", wantPath: "/berth/ID", wantSpec: "/berth/ID"},
		{name: "empty driver is cgroupfs", driver: "", parent: "",
			wantParentPath: "/berth", wantPath: "/berth/ID", wantSpec: "/berth/ID"},
		{name: "cgroupfs relative", driver: Cgroupfs, parent: "kubepods", wantErr: "absolute"},
		{name: "cgroupfs unclean", driver: Cgroupfs, parent: "/a/../b", wantErr: "clean"},
		{name: "cgroupfs slice name", driver: Cgroupfs, parent: "kubepods.slice", wantErr: "absolute"},
		{name: "systemd kubelet pod", driver: Systemd, parent: "kubepods-besteffort-pod1a2b_3c.slice",
			wantParentPath: "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod1a2b_3c.slice",
			wantPath:       "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod1a2b_3c.slice/berth-ID.scope",
			wantSpec:       "kubepods-besteffort-pod1a2b_3c.slice:berth:ID"},
		{name: "systemd kind (cgroupRoot /kubelet)", driver: Systemd, parent: "kubelet-kubepods-burstable-pod9.slice",
			wantParentPath: "/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-burstable.slice/kubelet-kubepods-burstable-pod9.slice",
			wantPath:       "/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-burstable.slice/kubelet-kubepods-burstable-pod9.slice/berth-ID.scope",
			wantSpec:       "kubelet-kubepods-burstable-pod9.slice:berth:ID"},
		{name: "systemd slice path, as the kubelet sends it", driver: Systemd,
			parent:         "/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-burstable.slice/kubelet-kubepods-burstable-pod9.slice",
			wantParentPath: "/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-burstable.slice/kubelet-kubepods-burstable-pod9.slice",
			wantPath:       "/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-burstable.slice/kubelet-kubepods-burstable-pod9.slice/berth-ID.scope",
			wantSpec:       "kubelet-kubepods-burstable-pod9.slice:berth:ID"},
		{name: "systemd root slice path", driver: Systemd, parent: "/",
			wantParentPath: "/", wantPath: "/berth-ID.scope", wantSpec: "-.slice:berth:ID"},
		{name: "systemd path of another slice", driver: Systemd, parent: "/x.slice/kubepods-pod1.slice", wantErr: "not the path of slice kubepods-pod1.slice"},
		{name: "systemd one level", driver: Systemd, parent: "kubepods.slice",
			wantParentPath: "/kubepods.slice", wantPath: "/kubepods.slice/berth-ID.scope", wantSpec: "kubepods.slice:berth:ID"},
		{name: "systemd root slice", driver: Systemd, parent: "-.slice",
			wantParentPath: "/", wantPath: "/berth-ID.scope", wantSpec: "-.slice:berth:ID"},
		{name: "systemd default", driver: Systemd, parent: "",
			wantParentPath: "/berth.slice", wantPath: "/berth.slice/berth-ID.scope", wantSpec: "berth.slice:berth:ID"},
		{name: "systemd path", driver: Systemd, parent: "/kubepods/pod1", wantErr: "slice"},
		{name: "systemd no suffix", driver: Systemd, parent: "kubepods", wantErr: "slice"},
		{name: "systemd double dash", driver: Systemd, parent: "a--b.slice", wantErr: "slice"},
		{name: "systemd leading dash", driver: Systemd, parent: "-a.slice", wantErr: "slice"},
		{name: "systemd trailing dash", driver: Systemd, parent: "a-.slice", wantErr: "slice"},
		{name: "systemd colon", driver: Systemd, parent: "a:b.slice", wantErr: "slice"},
		{name: "systemd bare suffix", driver: Systemd, parent: ".slice", wantErr: "slice"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := tt.driver.Parent(tt.parent)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Parent(%q) = %v, want an error with %q", tt.parent, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			c := p.Child("ID")
			if got := p.Path(); got != tt.wantParentPath {
				t.Errorf("parent path %q, want %q", got, tt.wantParentPath)
			}
			if got := c.Path(); got != tt.wantPath {
				t.Errorf("path %q, want %q", got, tt.wantPath)
			}
			if got := c.SpecPath(); got != tt.wantSpec {
				t.Errorf("spec path %q, want %q", got, tt.wantSpec)
			}
			// What a container's spec carries reads back to the same
			// cgroup (the monitor and stats read it so).
			back, err := p.Driver().FromSpec(c.SpecPath())
			if err != nil {
				t.Fatal(err)
			}
			if back != c {
				t.Errorf("FromSpec(%q) = %+v, want %+v", c.SpecPath(), back, c)
			}
		})
	}
}

func TestZeroParent(t *testing.T) {
	var p Parent
	if p.Driver() != Cgroupfs || p.Name() != "/berth" || p.Child("c1").SpecPath() != "/berth/c1" {
		t.Errorf("zero parent: driver %q name %q child %q", p.Driver(), p.Name(), p.Child("c1").SpecPath())
	}
}

// OCI cgroupsPaths that berth did not write itself (an NRI plugin's) read
// as libcontainer reads them.
func TestFromSpec(t *testing.T) {
	tests := []struct {
		driver   Driver
		spec     string
		wantPath string
		wantErr  bool
	}{
		{driver: Systemd, spec: "system.slice:docker:abc", wantPath: "/system.slice/docker-abc.scope"},
		{driver: Systemd, spec: ":berth:abc", wantPath: "/system.slice/berth-abc.scope"},
		{driver: Systemd, spec: "a-b.slice:nri:x", wantPath: "/a.slice/a-b.slice/nri-x.scope"},
		{driver: Systemd, spec: "a.slice:berth:a-b.slice", wantPath: "/a.slice/a-b.slice"},
		{driver: Systemd, spec: "/kubepods/pod1/c1", wantErr: true},
		{driver: Systemd, spec: "a.slice:berth:", wantErr: true},
		{driver: Systemd, spec: "a.slice:berth", wantErr: true},
		{driver: Cgroupfs, spec: "/kubepods/pod1/c1", wantPath: "/kubepods/pod1/c1"},
		{driver: Cgroupfs, spec: "/nri/../c1", wantPath: "/c1"},
		{driver: Cgroupfs, spec: "/", wantErr: true},
	}
	for _, tt := range tests {
		c, err := tt.driver.FromSpec(tt.spec)
		if tt.wantErr {
			if err == nil {
				t.Errorf("%s FromSpec(%q) = %q, want an error", tt.driver, tt.spec, c.Path())
			}
			continue
		}
		if err != nil || c.Path() != tt.wantPath {
			t.Errorf("%s FromSpec(%q) = %q, %v; want %q", tt.driver, tt.spec, c.Path(), err, tt.wantPath)
		}
	}
}

func TestParentSlice(t *testing.T) {
	for in, want := range map[string]string{
		"a.slice":                    "-.slice",
		"a-b.slice":                  "a.slice",
		"kubelet-kubepods-pod.slice": "kubelet-kubepods.slice",
	} {
		if got, err := parentSlice(in); err != nil || got != want {
			t.Errorf("parentSlice(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := parentSlice("-.slice"); err == nil {
		t.Error("parentSlice(-.slice): want an error")
	}
}

func TestCheck(t *testing.T) {
	if err := Cgroupfs.Check(context.Background()); err != nil {
		t.Errorf("cgroupfs needs nothing of the host: %v", err)
	}
	if systemd.IsRunningSystemd() {
		t.Skip("systemd runs here: the systemd check is for test/cgroup")
	}
	err := Systemd.Check(context.Background())
	if err == nil || !strings.Contains(err.Error(), "systemd is not running") {
		t.Errorf("systemd check without systemd = %v, want a message saying so", err)
	}
}
