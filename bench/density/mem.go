package density

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// procMem is one process's memory, in bytes.
type procMem struct {
	pid      int
	comm     string
	rss, pss int64
}

// group is the processes of one name: how many and their mean memory.
type group struct {
	Comm  string  `json:"comm"`
	Count int     `json:"count"`
	RSS   float64 `json:"rss_mb"` // mean per process
	PSS   float64 `json:"pss_mb"`
}

// containerComms are the pods' own processes (the manifest's sh and
// sleep), not the runtime's.
var containerComms = map[string]bool{"sh": true, "sleep": true}

// statusKB reads a "Key:   N kB" line of /proc/PID/status or smaps_rollup.
func statusKB(data []byte, key string) int64 {
	for _, line := range bytes.Split(data, []byte("\n")) {
		if v, ok := bytes.CutPrefix(line, []byte(key+":")); ok {
			f := strings.Fields(string(v))
			if len(f) > 0 {
				n, _ := strconv.ParseInt(f[0], 10, 64)
				return n << 10
			}
		}
	}
	return 0
}

// cpu is CPU time in seconds: a process's own (utime+stime) and that of
// its reaped children (cutime+cstime: for a daemon, the CNI plugins and
// runc or libcontainer helpers it ran), from /proc/PID/stat at 100 Hz.
type cpu struct {
	Self     float64 `json:"self_s"`
	Children float64 `json:"children_s"`
}

func procCPU(pid int) cpu {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return cpu{}
	}
	end := bytes.LastIndexByte(data, ')')
	if end < 0 {
		return cpu{}
	}
	f := strings.Fields(string(data[end+1:]))
	if len(f) < 15 {
		return cpu{}
	}
	tick := func(i int) float64 { n, _ := strconv.ParseFloat(f[i], 64); return n / 100 }
	// After the command: state is field 3, utime 14 ... cstime 17.
	return cpu{Self: tick(11) + tick(12), Children: tick(13) + tick(14)}
}

func (c cpu) sub(b cpu) cpu { return cpu{c.Self - b.Self, c.Children - b.Children} }

// machineBusy is the host's busy and total CPU time in seconds (/proc/stat).
func machineBusy() (busy, total float64) {
	data, _ := os.ReadFile("/proc/stat")
	line, _, _ := strings.Cut(string(data), "\n")
	f := strings.Fields(line)
	for i, v := range f[1:] {
		n, _ := strconv.ParseFloat(v, 64)
		if i >= 8 { // guest time is counted in user already
			break
		}
		total += n / 100
		if i != 3 && i != 4 { // idle, iowait
			busy += n / 100
		}
	}
	return busy, total
}

func vmRSS(pid int) int64 {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	return statusKB(b, "VmRSS")
}

func readProcMem(pid int) (procMem, bool) {
	comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	if err != nil {
		return procMem{}, false
	}
	roll, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	if err != nil {
		return procMem{}, false
	}
	return procMem{pid: pid, comm: strings.TrimSpace(string(comm)), rss: statusKB(roll, "Rss"), pss: statusKB(roll, "Pss")}, true
}

// runtimeProcs is the memory the runtime added for its pods: every process
// whose command line names the work dir (monitors, shims) or that lives
// under the kubelet's cgroupRoot (pause, the containers), but for the
// daemon itself, the kubelet and the containers' own processes, grouped
// by name. containers is the containers' processes' total PSS.
func runtimeProcs(work, cgroupRoot string, exclude ...int) (groups []group, pss int64, containers int64, cpuS float64) {
	skip := map[int]bool{}
	for _, p := range exclude {
		skip[p] = true
	}
	by := map[string]*group{}
	for _, pid := range procsOf(work, cgroupRoot) {
		if skip[pid] {
			continue
		}
		m, ok := readProcMem(pid)
		if !ok {
			continue
		}
		if containerComms[m.comm] {
			containers += m.pss
			continue
		}
		pss += m.pss
		c := procCPU(pid)
		cpuS += c.Self + c.Children
		g := by[m.comm]
		if g == nil {
			g = &group{Comm: m.comm}
			by[m.comm] = g
		}
		g.Count++
		g.RSS += float64(m.rss) / (1 << 20)
		g.PSS += float64(m.pss) / (1 << 20)
	}
	for _, g := range by {
		g.RSS /= float64(g.Count)
		g.PSS /= float64(g.Count)
		groups = append(groups, *g)
	}
	sort.Slice(groups, func(i, j int) bool { return groups[i].Comm < groups[j].Comm })
	return groups, pss, containers, cpuS
}

// cgroupMem is the mean over the pods' cgroups (memory hierarchy, v1 on
// this host) of usage_in_bytes, and of its anonymous + kernel part
// (total_rss + kmem), the v1 equivalent of memory.current without the
// page cache.
type cgroupMem struct {
	Pods       int     `json:"pods"`
	Usage      float64 `json:"usage_mb"`
	AnonKernel float64 `json:"anon_kernel_mb"`
	Cache      float64 `json:"cache_mb"`
	Procs      string  `json:"procs"` // which processes the pod cgroups hold
}

func podCgroups(cgroupRoot string) cgroupMem {
	var c cgroupMem
	comms := map[string]int{}
	base := filepath.Join("/sys/fs/cgroup/memory", cgroupRoot, "kubepods")
	filepath.WalkDir(base, func(p string, de os.DirEntry, err error) error {
		if err != nil || !de.IsDir() || !strings.HasPrefix(de.Name(), "pod") {
			return nil
		}
		usage := readInt(filepath.Join(p, "memory.usage_in_bytes"))
		kmem := readInt(filepath.Join(p, "memory.kmem.usage_in_bytes"))
		stat := readStat(filepath.Join(p, "memory.stat"))
		c.Pods++
		c.Usage += float64(usage) / (1 << 20)
		c.AnonKernel += float64(stat["total_rss"]+kmem) / (1 << 20)
		c.Cache += float64(stat["total_cache"]) / (1 << 20)
		filepath.WalkDir(p, func(q string, de os.DirEntry, err error) error {
			if err == nil && de.Name() == "cgroup.procs" {
				data, _ := os.ReadFile(q)
				for _, f := range strings.Fields(string(data)) {
					comm, _ := os.ReadFile("/proc/" + f + "/comm")
					comms[strings.TrimSpace(string(comm))]++
				}
			}
			return nil
		})
		return filepath.SkipDir
	})
	if c.Pods > 0 {
		c.Usage /= float64(c.Pods)
		c.AnonKernel /= float64(c.Pods)
		c.Cache /= float64(c.Pods)
	}
	var names []string
	for n, k := range comms {
		names = append(names, fmt.Sprintf("%s×%d", n, k))
	}
	sort.Strings(names)
	c.Procs = strings.Join(names, " ")
	return c
}

func readInt(p string) int64 {
	b, _ := os.ReadFile(p)
	n, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return n
}

func readStat(p string) map[string]int64 {
	m := map[string]int64{}
	f, err := os.Open(p)
	if err != nil {
		return m
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), " ")
		if ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			m[k] = n
		}
	}
	return m
}
