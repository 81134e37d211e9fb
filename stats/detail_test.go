package stats

import (
	"net"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

func TestReadDetailV1(t *testing.T) {
	root := t.TempDir()
	info := ""
	for i, ctl := range []string{"cpu", "cpuacct", "memory", "pids", "blkio"} {
		info += strings.Join([]string{"4" + strconv.Itoa(i), "1", "0:1", "/", filepath.Join(root, ctl), "rw", "-", "cgroup", "cgroup", "rw," + ctl}, " ") + "\n"
	}
	c, err := parseMountinfo(strings.NewReader(info))
	if err != nil {
		t.Fatal(err)
	}
	// This test process stands in for the container's one process, with
	// one socket of its own among its descriptors.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	self := strconv.Itoa(os.Getpid())
	write(t, filepath.Join(root, "cpu/pod/c1"), map[string]string{
		"cpu.stat":          "nr_periods 40\nnr_throttled 4\nthrottled_time 2500000000\n",
		"cpu.cfs_period_us": "100000\n",
		"cpu.cfs_quota_us":  "20000\n",
		"cpu.shares":        "1024\n",
	})
	write(t, filepath.Join(root, "cpuacct/pod/c1"), map[string]string{"cpuacct.stat": "user 250\nsystem 50\n"})
	write(t, filepath.Join(root, "memory/pod/c1"), map[string]string{
		"memory.max_usage_in_bytes":   "90000\n",
		"memory.failcnt":              "3\n",
		"memory.kmem.usage_in_bytes":  "4096\n",
		"memory.stat":                 "mapped_file 1\ntotal_mapped_file 8192\n",
		"memory.oom_control":          "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n",
		"memory.memsw.limit_in_bytes": "9223372036854771712\n",
	})
	write(t, filepath.Join(root, "pids/pod/c1"), map[string]string{
		"pids.max":     "max\n",
		"tasks":        self + "\n" + self + "\n",
		"cgroup.procs": self + "\n",
	})
	write(t, filepath.Join(root, "blkio/pod/c1"), map[string]string{
		"blkio.throttle.io_service_bytes_recursive": "8:16 Read 0\n8:16 Write 512\n8:0 Read 4096\n8:0 Write 8192\n8:0 Sync 0\n8:0 Total 12288\nTotal 12800\n",
		"blkio.throttle.io_serviced_recursive":      "8:16 Read 0\n8:16 Write 1\n8:0 Read 1\n8:0 Write 2\n8:0 Total 3\nTotal 4\n",
	})

	d := c.ReadDetail("/pod/c1")
	want := Detail{
		HasCFS: true, Periods: 40, ThrottledPeriods: 4, ThrottledNs: 2500000000,
		HasCPUTimes: true, UserNs: 2500000000, SystemNs: 500000000,
		CPUPeriodUs: 100000, CPUQuotaUs: 20000, CPUShares: 1024,
		HasMemory: true, MaxUsage: 90000, Failcnt: 3, KernelUsage: 4096, MappedFile: 8192, OOMKills: 2,
		Threads: 2,
		IO: []DeviceIO{
			{Major: 8, Minor: 0, ReadBytes: 4096, WriteBytes: 8192, Reads: 1, Writes: 2},
			{Major: 8, Minor: 16, WriteBytes: 512, Writes: 1},
		},
	}
	got := *d
	if got.FileDescriptors < 1 || got.Sockets < 1 || got.Sockets > got.FileDescriptors {
		t.Errorf("fds %d, sockets %d: want the test process's descriptors, with its listener among them", got.FileDescriptors, got.Sockets)
	}
	got.FileDescriptors, got.Sockets = 0, 0
	if !reflect.DeepEqual(got, want) {
		t.Errorf("detail\n got %+v\nwant %+v", got, want)
	}

	write(t, filepath.Join(root, "cpu/pod/c2"), map[string]string{"cpu.cfs_quota_us": "-1\n"})
	if d := c.ReadDetail("/pod/c2"); d.CPUQuotaUs != 0 || d.HasMemory || d.HasCPUTimes {
		t.Errorf("unlimited quota / missing controllers read %+v", d)
	}
}

func TestReadDetailV2(t *testing.T) {
	root := t.TempDir()
	c, err := parseMountinfo(strings.NewReader("30 23 0:26 / " + root + " rw - cgroup2 cgroup2 rw"))
	if err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(root, "pod/c1"), map[string]string{
		"cpu.stat":        "usage_usec 3000\nuser_usec 2000\nsystem_usec 1000\nnr_periods 10\nnr_throttled 1\nthrottled_usec 5000\n",
		"cpu.max":         "max 100000\n",
		"cpu.weight":      "39\n",
		"memory.peak":     "70000\n",
		"memory.events":   "low 0\nhigh 0\nmax 5\noom 1\noom_kill 1\n",
		"memory.stat":     "kernel 2048\nfile_mapped 1024\n",
		"memory.swap.max": "max\n",
		"pids.max":        "64\n",
		"cgroup.threads":  "1\n2\n3\n",
		"cgroup.procs":    "",
		"io.stat":         "254:0 rbytes=1048576 wbytes=2097152 rios=16 wios=32 dbytes=0 dios=0\n7:1 rbytes=4096 wbytes=0 rios=1 wios=0 dbytes=0 dios=0\n",
	})
	d := c.ReadDetail("/pod/c1")
	want := Detail{
		HasCFS: true, Periods: 10, ThrottledPeriods: 1, ThrottledNs: 5000000,
		HasCPUTimes: true, UserNs: 2000000, SystemNs: 1000000,
		CPUPeriodUs: 100000, CPUShares: 2 + 38*262142/9999,
		HasMemory: true, MaxUsage: 70000, Failcnt: 5, KernelUsage: 2048, MappedFile: 1024, OOMKills: 1,
		Threads: 3, ThreadsMax: 64,
		IO: []DeviceIO{
			{Major: 254, Minor: 0, ReadBytes: 1 << 20, WriteBytes: 2 << 20, Reads: 16, Writes: 32},
			{Major: 7, Minor: 1, ReadBytes: 4096, Reads: 1},
		},
	}
	if !reflect.DeepEqual(*d, want) {
		t.Errorf("detail\n got %+v\nwant %+v", *d, want)
	}
}
