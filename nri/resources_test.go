package nri

import (
	"errors"
	"testing"

	"github.com/containerd/nri/pkg/api"
	rspec "github.com/opencontainers/runtime-spec/specs-go"
)

func ptr[T any](v T) *T { return &v }

func current() *rspec.LinuxResources {
	return &rspec.LinuxResources{
		CPU:            &rspec.LinuxCPU{Shares: ptr(uint64(256)), Quota: ptr(int64(20000)), Period: ptr(uint64(100000)), Cpus: "0-1"},
		Memory:         &rspec.LinuxMemory{Limit: ptr(int64(100 << 20)), Swap: ptr(int64(100 << 20)), Reservation: ptr(int64(10 << 20))},
		HugepageLimits: []rspec.LinuxHugepageLimit{{Pagesize: "2MB", Limit: 1 << 21}},
		Pids:           &rspec.LinuxPids{Limit: ptr(int64(100))},
	}
}

func TestMergeResourcesKeepsUnset(t *testing.T) {
	cur := current()
	u := &api.ContainerUpdate{}
	u.SetLinuxCPUSetCPUs("1")
	u.SetLinuxMemoryLimit(200 << 20)
	got, err := MergeResources(cur, u.GetLinux().GetResources(), false)
	if err != nil {
		t.Fatal(err)
	}
	if got.CPU.Cpus != "1" || *got.CPU.Shares != 256 || *got.CPU.Quota != 20000 || *got.CPU.Period != 100000 {
		t.Errorf("cpu: %+v", got.CPU)
	}
	// swap == limit (no swap) follows the limit up.
	if *got.Memory.Limit != 200<<20 || *got.Memory.Swap != 200<<20 || *got.Memory.Reservation != 10<<20 {
		t.Errorf("memory: limit %d swap %d reservation %d", *got.Memory.Limit, *got.Memory.Swap, *got.Memory.Reservation)
	}
	if len(got.HugepageLimits) != 1 || got.HugepageLimits[0].Limit != 1<<21 {
		t.Errorf("hugepages: %+v", got.HugepageLimits)
	}
	if got.Pids != nil {
		t.Errorf("pids sent although the update does not set them: %+v", got.Pids)
	}
	// The current resources are not modified.
	if cur.CPU.Cpus != "0-1" || *cur.Memory.Limit != 100<<20 {
		t.Errorf("current resources modified: %+v %+v", cur.CPU, cur.Memory)
	}
}

func TestMergeResourcesSwap(t *testing.T) {
	cur := current()
	cur.Memory.Swap = ptr(int64(300 << 20)) // real swap
	u := &api.ContainerUpdate{}
	u.SetLinuxMemoryLimit(150 << 20)
	got, err := MergeResources(cur, u.GetLinux().GetResources(), false)
	if err != nil {
		t.Fatal(err)
	}
	if *got.Memory.Swap != 300<<20 {
		t.Errorf("swap above the new limit changed: %d", *got.Memory.Swap)
	}
	u.SetLinuxMemoryLimit(400 << 20)
	if got, _ = MergeResources(cur, u.GetLinux().GetResources(), false); *got.Memory.Swap != 400<<20 {
		t.Errorf("swap below the new limit: %d", *got.Memory.Swap)
	}
	u.SetLinuxMemorySwap(500 << 20)
	if got, _ = MergeResources(cur, u.GetLinux().GetResources(), false); *got.Memory.Swap != 500<<20 {
		t.Errorf("explicit swap: %d", *got.Memory.Swap)
	}
}

func TestMergeResourcesPidsHugepagesUnified(t *testing.T) {
	u := &api.ContainerUpdate{}
	u.SetLinuxPidLimits(42)
	u.AddLinuxHugepageLimit("2MB", 1<<22)
	u.AddLinuxHugepageLimit("1GB", 1<<30)
	got, err := MergeResources(current(), u.GetLinux().GetResources(), false)
	if err != nil {
		t.Fatal(err)
	}
	if got.Pids == nil || *got.Pids.Limit != 42 {
		t.Errorf("pids: %+v", got.Pids)
	}
	if len(got.HugepageLimits) != 2 || got.HugepageLimits[0].Limit != 1<<22 || got.HugepageLimits[1].Pagesize != "1GB" {
		t.Errorf("hugepages: %+v", got.HugepageLimits)
	}
	uni := &api.ContainerUpdate{}
	uni.AddLinuxUnified("memory.high", "1")
	if _, err := MergeResources(current(), uni.GetLinux().GetResources(), false); err == nil {
		t.Error("unified accepted on cgroup v1")
	}
	if got, err := MergeResources(current(), uni.GetLinux().GetResources(), true); err != nil || got.Unified["memory.high"] != "1" {
		t.Errorf("unified on v2: %v %v", err, got)
	}
}

func TestMergeResourcesRefused(t *testing.T) {
	u := &api.ContainerUpdate{}
	u.SetLinuxBlockIOClass("slow")
	if _, err := MergeResources(current(), u.GetLinux().GetResources(), false); !errors.Is(err, ErrUnsupported) {
		t.Errorf("block I/O class: %v", err)
	}
	if got, err := MergeResources(nil, nil, false); err != nil || got == nil {
		t.Errorf("empty merge: %v %v", got, err)
	}
}
