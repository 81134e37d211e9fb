// Package stats measures pods and containers for the CRI stats and
// metrics RPCs: CPU, memory and process counts from the cgroups (v1 or
// v2, whichever driver placed them), writable-layer usage from the
// filesystem (cached, walked in the background), network counters from
// inside each pod's network namespace. It answers from what berth's
// services know and a handful of small file reads per object.
package stats

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
)

// Cgroups reads cgroup statistics. Paths are cgroup paths as runtimes
// name them (/kubepods/pod1/ctr, /kubepods.slice/.../x.scope), relative
// to the root of each hierarchy.
type Cgroups struct {
	// v1 maps a controller to its hierarchy; empty on a v2-only host. A
	// hybrid host's unified hierarchy holds no controllers: v1 is used.
	v1 map[string]mount
	v2 *mount
	// bufs are read buffers: a sample reads several files, a list many
	// samples, possibly in parallel.
	bufs sync.Pool
}

type mount struct {
	point string // where it is mounted
	root  string // the cgroup mounted there (not / inside a cgroup namespace)
}

// NewCgroups finds the hierarchies this process sees.
func NewCgroups() (*Cgroups, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("stats: %w", err)
	}
	defer f.Close()
	return parseMountinfo(f)
}

func parseMountinfo(r io.Reader) (*Cgroups, error) {
	c := &Cgroups{v1: map[string]mount{}}
	c.bufs.New = func() any { b := make([]byte, 16<<10); return &b }
	mounts, err := mountinfo.GetMountsFromReader(r, func(m *mountinfo.Info) (skip, stop bool) {
		return m.FSType != "cgroup" && m.FSType != "cgroup2", false
	})
	if err != nil {
		return nil, fmt.Errorf("stats: read mountinfo: %w", err)
	}
	for _, info := range mounts {
		m := mount{point: info.Mountpoint, root: info.Root}
		switch info.FSType {
		case "cgroup2":
			if c.v2 == nil {
				c.v2 = &m
			}
		case "cgroup":
			for _, opt := range strings.Split(info.VFSOptions, ",") {
				switch opt {
				case "cpuacct", "memory", "pids", "cpu", "blkio":
					if _, dup := c.v1[opt]; !dup {
						c.v1[opt] = m
					}
				}
			}
		}
	}
	if len(c.v1) == 0 && c.v2 == nil {
		return nil, errors.New("stats: no cgroup hierarchy is mounted")
	}
	if len(c.v1) > 0 {
		c.v2 = nil
	}
	return c, nil
}

// V2 reports whether the host is cgroup v2 only.
func (c *Cgroups) V2() bool { return c.v2 != nil }

func (m mount) dir(cg string) (string, bool) {
	cg = path.Clean("/" + cg)
	if m.root != "/" {
		rel, ok := strings.CutPrefix(cg, m.root)
		if !ok || (rel != "" && rel[0] != '/') {
			return "", false
		}
		cg = rel
	}
	return filepath.Join(m.point, cg), true
}

// Sample is one reading of a cgroup. Has* say which parts could be read:
// a cgroup that is gone, or a controller the host lacks, reads nothing.
type Sample struct {
	At time.Time

	HasCPU bool
	CPU    uint64 // cumulative usage, ns

	HasMemory       bool
	MemUsage        uint64 // all memory charged, page cache included
	MemWorkingSet   uint64 // usage less inactive file pages: what eviction looks at
	MemRSS          uint64 // anonymous memory and swap cache
	MemCache        uint64 // page cache
	MemLimit        uint64 // 0: none
	PageFaults      uint64
	MajorPageFaults uint64
	HasSwap         bool
	SwapUsage       uint64
	SwapLimit       uint64 // 0: none

	HasPids bool
	Pids    uint64

	// PSI is pressure, v2 only: resource ("cpu", "memory", "io") → values.
	PSI map[string]*Pressure
}

// Pressure is one resource's pressure stall information.
type Pressure struct {
	Some, Full PressureLine
	HasFull    bool
}

// PressureLine is one line of a *.pressure file.
type PressureLine struct {
	Avg10, Avg60, Avg300 float64
	Total                uint64 // µs
}

// noLimit: v1 reports "no limit" as the largest page-aligned value; any
// limit this large is none.
const noLimit = 1 << 62

// Read samples the cgroup at cg. On this path are the only costs of a
// stats call that grow with the node: a few small files per cgroup (four
// on v1), read with one open, one read and one close each.
func (c *Cgroups) Read(cg string) *Sample {
	bp := c.bufs.Get().(*[]byte)
	defer c.bufs.Put(bp)
	r := reader{buf: *bp}
	s := c.sample(&r, cg)
	*bp = r.buf
	return s
}

// ReadWithDetail is Read and ReadDetail of cg at once: the files both
// parse (memory.stat; cpu.stat on v2) are read once.
func (c *Cgroups) ReadWithDetail(cg string) (*Sample, *Detail) {
	bp := c.bufs.Get().(*[]byte)
	defer c.bufs.Put(bp)
	r := reader{buf: *bp, keyedRead: map[string]map[string]uint64{}}
	s, d := c.sample(&r, cg), c.detail(&r, cg)
	*bp = r.buf
	return s, d
}

func (c *Cgroups) sample(r *reader, cg string) *Sample {
	s := &Sample{At: time.Now()}
	if c.v2 != nil {
		c.readV2(r, cg, s)
	} else {
		c.readV1(r, cg, s)
	}
	return s
}

func (c *Cgroups) readV1(r *reader, cg string, s *Sample) {
	if m, ok := c.v1["cpuacct"]; ok {
		if d, ok := m.dir(cg); ok {
			s.CPU, s.HasCPU = r.uint(filepath.Join(d, "cpuacct.usage"))
		}
	}
	if m, ok := c.v1["memory"]; ok {
		if d, ok := m.dir(cg); ok {
			readMemoryV1(r, d, s)
		}
	}
	if m, ok := c.v1["pids"]; ok {
		if d, ok := m.dir(cg); ok {
			s.Pids, s.HasPids = r.uint(filepath.Join(d, "pids.current"))
		}
	}
}

// readMemoryV1 needs two files: memory.stat also has the limits
// (hierarchical: the tightest of the cgroup's and its ancestors') and,
// with swap accounting, the swap in use.
func readMemoryV1(r *reader, d string, s *Sample) {
	usage, ok := r.uint(filepath.Join(d, "memory.usage_in_bytes"))
	if !ok {
		return
	}
	st, err := r.keyed(filepath.Join(d, "memory.stat"))
	if err != nil {
		return
	}
	s.HasMemory, s.MemUsage = true, usage
	// The total_ entries count the cgroup's descendants too.
	s.MemWorkingSet = sub(usage, st["total_inactive_file"])
	s.MemRSS = st["total_rss"]
	s.MemCache = st["total_cache"]
	s.PageFaults, s.MajorPageFaults = st["total_pgfault"], st["total_pgmajfault"]
	if l := st["hierarchical_memory_limit"]; l > 0 && l < noLimit {
		s.MemLimit = l
	}
	if sw, ok := st["total_swap"]; ok {
		s.HasSwap, s.SwapUsage = true, sw
		if l := st["hierarchical_memsw_limit"]; l > 0 && l < noLimit {
			s.SwapLimit = sub(l, s.MemLimit)
		}
	}
}

func (c *Cgroups) readV2(r *reader, cg string, s *Sample) {
	d, ok := c.v2.dir(cg)
	if !ok {
		return
	}
	if st, err := r.keyed(filepath.Join(d, "cpu.stat")); err == nil {
		if us, ok := st["usage_usec"]; ok {
			s.CPU, s.HasCPU = us*1000, true
		}
	}
	if usage, ok := r.uint(filepath.Join(d, "memory.current")); ok {
		if st, err := r.keyed(filepath.Join(d, "memory.stat")); err == nil {
			s.HasMemory, s.MemUsage = true, usage
			s.MemWorkingSet = sub(usage, st["inactive_file"])
			s.MemRSS = st["anon"]
			s.MemCache = st["file"]
			s.PageFaults, s.MajorPageFaults = st["pgfault"], st["pgmajfault"]
			s.MemLimit, _ = r.uint(filepath.Join(d, "memory.max")) // "max" reads as none
		}
	}
	if sw, ok := r.uint(filepath.Join(d, "memory.swap.current")); ok {
		s.HasSwap, s.SwapUsage = true, sw
		s.SwapLimit, _ = r.uint(filepath.Join(d, "memory.swap.max"))
	}
	s.Pids, s.HasPids = r.uint(filepath.Join(d, "pids.current"))
	for _, res := range []string{"cpu", "memory", "io"} {
		if b, err := r.read(filepath.Join(d, res+".pressure")); err == nil {
			if p, ok := parsePressure(string(b)); ok {
				if s.PSI == nil {
					s.PSI = map[string]*Pressure{}
				}
				s.PSI[res] = p
			}
		}
	}
}

// reader reads small kernel files into a reused buffer.
type reader struct {
	buf []byte
	// keyedRead, if not nil, keeps what keyed parsed, by path, for a
	// second look at the same file.
	keyedRead map[string]map[string]uint64
}

// read returns the file's content, valid until the next read. A kernel
// file the buffer holds comes in one read(2); os.ReadFile would add a
// stat and a read that finds the end.
func (r *reader) read(p string) ([]byte, error) {
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	n := 0
	for {
		m, err := unix.Read(fd, r.buf[n:])
		if err != nil {
			return nil, err
		}
		n += m
		if m == 0 || n < len(r.buf) {
			return r.buf[:n], nil
		}
		r.buf = append(r.buf, make([]byte, len(r.buf))...)
	}
}

func (r *reader) uint(p string) (uint64, bool) {
	b, err := r.read(p)
	if err != nil {
		return 0, false
	}
	v, err := strconv.ParseUint(string(bytes.TrimSpace(b)), 10, 64)
	if err != nil {
		return 0, false
	}
	return v, true
}

func (r *reader) keyed(p string) (map[string]uint64, error) {
	if m, ok := r.keyedRead[p]; ok {
		return m, nil
	}
	b, err := r.read(p)
	if err != nil {
		return nil, err
	}
	m := parseKeyed(b)
	if r.keyedRead != nil {
		r.keyedRead[p] = m
	}
	return m, nil
}

func sub(a, b uint64) uint64 {
	if b > a {
		return 0
	}
	return a - b
}

// parseKeyed parses "key value" lines (memory.stat, cpu.stat).
func parseKeyed(b []byte) map[string]uint64 {
	out := make(map[string]uint64, 64)
	for len(b) > 0 {
		var line []byte
		line, b, _ = bytes.Cut(b, []byte{'\n'})
		k, v, ok := bytes.Cut(line, []byte{' '})
		if !ok {
			continue
		}
		if n, err := strconv.ParseUint(string(v), 10, 64); err == nil {
			out[string(k)] = n
		}
	}
	return out
}

// parsePressure parses a PSI file:
//
//	some avg10=0.00 avg60=0.00 avg300=0.00 total=0
//	full avg10=0.00 avg60=0.00 avg300=0.00 total=0
func parsePressure(text string) (*Pressure, bool) {
	ps := &Pressure{}
	found := false
	for _, line := range strings.Split(strings.TrimSpace(text), "\n") {
		f := strings.Fields(line)
		if len(f) != 5 {
			continue
		}
		var pl PressureLine
		for _, kv := range f[1:] {
			k, v, _ := strings.Cut(kv, "=")
			switch k {
			case "avg10":
				pl.Avg10, _ = strconv.ParseFloat(v, 64)
			case "avg60":
				pl.Avg60, _ = strconv.ParseFloat(v, 64)
			case "avg300":
				pl.Avg300, _ = strconv.ParseFloat(v, 64)
			case "total":
				pl.Total, _ = strconv.ParseUint(v, 10, 64)
			}
		}
		switch f[0] {
		case "some":
			ps.Some, found = pl, true
		case "full":
			ps.Full, ps.HasFull = pl, true
		}
	}
	return ps, found
}

// Add sums b into s, for a pod measured as the sum of its cgroups.
func (s *Sample) Add(b *Sample) {
	if b.HasCPU {
		s.HasCPU, s.CPU = true, s.CPU+b.CPU
	}
	if b.HasMemory {
		s.HasMemory = true
		s.MemUsage += b.MemUsage
		s.MemWorkingSet += b.MemWorkingSet
		s.MemRSS += b.MemRSS
		s.MemCache += b.MemCache
		s.PageFaults += b.PageFaults
		s.MajorPageFaults += b.MajorPageFaults
	}
	if b.HasSwap {
		s.HasSwap, s.SwapUsage = true, s.SwapUsage+b.SwapUsage
	}
	if b.HasPids {
		s.HasPids, s.Pids = true, s.Pids+b.Pids
	}
}
