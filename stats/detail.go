package stats

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Detail is the part of a cgroup's state that only the metrics RPC
// reports (cAdvisor's full set): CFS throttling, user/system CPU time,
// the configured limits, memory high-water marks and OOM kills, and the
// threads, file descriptors and sockets of its processes. It is read on
// demand, apart from Sample, so that the stats path keeps its few reads.
type Detail struct {
	HasCFS                    bool
	Periods, ThrottledPeriods uint64
	ThrottledNs               uint64
	HasCPUTimes               bool
	UserNs, SystemNs          uint64
	CPUPeriodUs, CPUQuotaUs   uint64 // quota 0: none
	CPUShares                 uint64
	HasMemory                 bool
	MaxUsage, Failcnt         uint64
	KernelUsage, MappedFile   uint64
	OOMKills                  uint64
	SwapLimit                 uint64 // memory+swap limit on v1, swap limit on v2; 0: none
	Threads, ThreadsMax       uint64 // ThreadsMax 0: none
	FileDescriptors, Sockets  uint64
	IO                        []DeviceIO // per block device: io.stat, or v1's blkio
}

// userHZ is the unit of cpuacct.stat: the kernel's USER_HZ, 100 on every
// architecture Linux exports to user space with cgroup v1.
const userHZ = 100

// ReadDetail reads the Detail of the cgroup at cg; what cannot be read
// (a controller the host lacks, a cgroup that is gone) stays zero.
func (c *Cgroups) ReadDetail(cg string) *Detail {
	bp := c.bufs.Get().(*[]byte)
	defer c.bufs.Put(bp)
	r := reader{buf: *bp}
	d := c.detail(&r, cg)
	*bp = r.buf
	return d
}

func (c *Cgroups) detail(r *reader, cg string) *Detail {
	d := &Detail{}
	var procsFile string
	if c.v2 != nil {
		procsFile = c.readDetailV2(r, cg, d)
	} else {
		procsFile = c.readDetailV1(r, cg, d)
	}
	if procsFile != "" {
		if b, err := r.read(procsFile); err == nil {
			d.FileDescriptors, d.Sockets = countFDs(string(b))
		}
	}
	return d
}

func (c *Cgroups) dirV1(controller, cg string) (string, bool) {
	m, ok := c.v1[controller]
	if !ok {
		return "", false
	}
	return m.dir(cg)
}

func (c *Cgroups) readDetailV1(r *reader, cg string, d *Detail) (procs string) {
	if dir, ok := c.dirV1("cpu", cg); ok {
		if st, err := r.keyed(filepath.Join(dir, "cpu.stat")); err == nil {
			d.HasCFS = true
			d.Periods, d.ThrottledPeriods, d.ThrottledNs = st["nr_periods"], st["nr_throttled"], st["throttled_time"]
		}
		d.CPUPeriodUs, _ = r.uint(filepath.Join(dir, "cpu.cfs_period_us"))
		d.CPUQuotaUs = r.quota(filepath.Join(dir, "cpu.cfs_quota_us"))
		d.CPUShares, _ = r.uint(filepath.Join(dir, "cpu.shares"))
	}
	if dir, ok := c.dirV1("cpuacct", cg); ok {
		if st, err := r.keyed(filepath.Join(dir, "cpuacct.stat")); err == nil {
			d.HasCPUTimes = true
			d.UserNs, d.SystemNs = st["user"]*(1e9/userHZ), st["system"]*(1e9/userHZ)
		}
	}
	if dir, ok := c.dirV1("memory", cg); ok {
		if max, ok := r.uint(filepath.Join(dir, "memory.max_usage_in_bytes")); ok {
			d.HasMemory, d.MaxUsage = true, max
			d.Failcnt, _ = r.uint(filepath.Join(dir, "memory.failcnt"))
			d.KernelUsage, _ = r.uint(filepath.Join(dir, "memory.kmem.usage_in_bytes"))
			if st, err := r.keyed(filepath.Join(dir, "memory.stat")); err == nil {
				d.MappedFile = st["total_mapped_file"]
			}
			if st, err := r.keyed(filepath.Join(dir, "memory.oom_control")); err == nil {
				d.OOMKills = st["oom_kill"]
			}
			if l, ok := r.uint(filepath.Join(dir, "memory.memsw.limit_in_bytes")); ok && l < noLimit {
				d.SwapLimit = l
			}
		}
	}
	if dir, ok := c.dirV1("pids", cg); ok {
		d.ThreadsMax, _ = r.uint(filepath.Join(dir, "pids.max")) // "max" reads as none
		if b, err := r.read(filepath.Join(dir, "tasks")); err == nil {
			d.Threads = uint64(bytes.Count(b, []byte{'\n'}))
		}
		procs = filepath.Join(dir, "cgroup.procs")
	}
	if dir, ok := c.dirV1("blkio", cg); ok {
		// Copied: the reader's buffer is reused by the next read.
		if b, err := r.read(filepath.Join(dir, "blkio.throttle.io_service_bytes_recursive")); err == nil {
			serviceBytes := bytes.Clone(b)
			if b, err := r.read(filepath.Join(dir, "blkio.throttle.io_serviced_recursive")); err == nil {
				d.IO = parseBlkioV1(serviceBytes, b)
			}
		}
	}
	return procs
}

func (c *Cgroups) readDetailV2(r *reader, cg string, d *Detail) (procs string) {
	dir, ok := c.v2.dir(cg)
	if !ok {
		return ""
	}
	if st, err := r.keyed(filepath.Join(dir, "cpu.stat")); err == nil {
		d.HasCPUTimes = true
		d.UserNs, d.SystemNs = st["user_usec"]*1000, st["system_usec"]*1000
		if _, ok := st["nr_periods"]; ok {
			d.HasCFS = true
			d.Periods, d.ThrottledPeriods, d.ThrottledNs = st["nr_periods"], st["nr_throttled"], st["throttled_usec"]*1000
		}
	}
	if b, err := r.read(filepath.Join(dir, "cpu.max")); err == nil {
		quota, period, _ := strings.Cut(strings.TrimSpace(string(b)), " ")
		d.CPUPeriodUs, _ = strconv.ParseUint(period, 10, 64)
		d.CPUQuotaUs, _ = strconv.ParseUint(quota, 10, 64) // "max": none
	}
	if w, ok := r.uint(filepath.Join(dir, "cpu.weight")); ok && w > 0 {
		// The inverse of the kubelet's shares→weight conversion.
		d.CPUShares = 2 + (w-1)*262142/9999
	}
	if peak, ok := r.uint(filepath.Join(dir, "memory.peak")); ok {
		d.HasMemory, d.MaxUsage = true, peak
	}
	if st, err := r.keyed(filepath.Join(dir, "memory.events")); err == nil {
		d.HasMemory = true
		d.Failcnt, d.OOMKills = st["max"], st["oom_kill"]
	}
	if st, err := r.keyed(filepath.Join(dir, "memory.stat")); err == nil {
		d.KernelUsage, d.MappedFile = st["kernel"], st["file_mapped"]
	}
	d.SwapLimit, _ = r.uint(filepath.Join(dir, "memory.swap.max"))
	d.ThreadsMax, _ = r.uint(filepath.Join(dir, "pids.max"))
	if b, err := r.read(filepath.Join(dir, "cgroup.threads")); err == nil {
		d.Threads = uint64(bytes.Count(b, []byte{'\n'}))
	}
	if b, err := r.read(filepath.Join(dir, "io.stat")); err == nil {
		d.IO = parseIOStat(b)
	}
	return filepath.Join(dir, "cgroup.procs")
}

// quota reads cpu.cfs_quota_us, where -1 means none.
func (r *reader) quota(p string) uint64 {
	b, err := r.read(p)
	if err != nil {
		return 0
	}
	v, err := strconv.ParseInt(string(bytes.TrimSpace(b)), 10, 64)
	if err != nil || v < 0 {
		return 0
	}
	return uint64(v)
}

// countFDs counts the open descriptors, and among them the sockets, of
// the processes listed one pid per line.
func countFDs(pids string) (fds, sockets uint64) {
	for _, pid := range strings.Fields(pids) {
		dir := "/proc/" + pid + "/fd"
		entries, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		for _, e := range entries {
			fds++
			if link, err := os.Readlink(dir + "/" + e.Name()); err == nil && strings.HasPrefix(link, "socket:") {
				sockets++
			}
		}
	}
	return fds, sockets
}
