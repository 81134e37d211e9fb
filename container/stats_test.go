package container

import (
	"testing"

	"github.com/berth-runtime/berth/internal/cgroup"
)

// Stats read a container's cgroup where its spec put it, in the form of
// the driver that made it.
func TestCgroupPathFromSpec(t *testing.T) {
	for _, tt := range []struct {
		driver cgroup.Driver
		spec   string
		want   string
	}{
		{driver: cgroup.Cgroupfs, spec: `{"linux":{"cgroupsPath":"/kubepods/pod1/c1"}}`, want: "/kubepods/pod1/c1"},
		{driver: "", spec: `{"linux":{"cgroupsPath":"/berth/c1"}}`, want: "/berth/c1"},
		{driver: cgroup.Systemd, spec: `{"linux":{"cgroupsPath":"kubepods-besteffort-pod1.slice:berth:c1"}}`,
			want: "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod1.slice/berth-c1.scope"},
		{driver: cgroup.Systemd, spec: `{"linux":{"cgroupsPath":"/kubepods/pod1/c1"}}`, want: ""},
		{driver: cgroup.Cgroupfs, spec: `not json`, want: ""},
	} {
		c := &ctr{spec: []byte(tt.spec)}
		if got := c.cgroupPath(tt.driver); got != tt.want {
			t.Errorf("%s %s: cgroup %q, want %q", tt.driver, tt.spec, got, tt.want)
		}
	}
}
