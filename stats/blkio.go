package stats

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
)

// DeviceIO is a cgroup's I/O on one block device since it was made.
type DeviceIO struct {
	Major, Minor          uint64
	ReadBytes, WriteBytes uint64
	Reads, Writes         uint64 // operations completed
}

// parseIOStat parses cgroup v2's io.stat:
//
//	253:0 rbytes=4096 wbytes=8192 rios=1 wios=2 dbytes=0 dios=0
func parseIOStat(b []byte) []DeviceIO {
	var out []DeviceIO
	for _, line := range bytes.Split(b, []byte{'\n'}) {
		f := strings.Fields(string(line))
		if len(f) < 2 {
			continue
		}
		var d DeviceIO
		if _, err := fmt.Sscanf(f[0], "%d:%d", &d.Major, &d.Minor); err != nil {
			continue
		}
		for _, kv := range f[1:] {
			k, v, _ := strings.Cut(kv, "=")
			n, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				continue
			}
			switch k {
			case "rbytes":
				d.ReadBytes = n
			case "wbytes":
				d.WriteBytes = n
			case "rios":
				d.Reads = n
			case "wios":
				d.Writes = n
			}
		}
		out = append(out, d)
	}
	return out
}

// parseBlkioV1 merges cgroup v1's blkio.throttle.io_service_bytes_recursive
// and io_serviced_recursive ("8:0 Read 4096" lines, a "Total" line last)
// into one DeviceIO per device, in device order.
func parseBlkioV1(serviceBytes, serviced []byte) []DeviceIO {
	devs := map[[2]uint64]*DeviceIO{}
	add := func(b []byte, bytesField bool) {
		for _, line := range bytes.Split(b, []byte{'\n'}) {
			f := strings.Fields(string(line))
			if len(f) != 3 {
				continue
			}
			var maj, min uint64
			if _, err := fmt.Sscanf(f[0], "%d:%d", &maj, &min); err != nil {
				continue
			}
			n, err := strconv.ParseUint(f[2], 10, 64)
			if err != nil {
				continue
			}
			d := devs[[2]uint64{maj, min}]
			if d == nil {
				d = &DeviceIO{Major: maj, Minor: min}
				devs[[2]uint64{maj, min}] = d
			}
			switch {
			case f[1] == "Read" && bytesField:
				d.ReadBytes = n
			case f[1] == "Write" && bytesField:
				d.WriteBytes = n
			case f[1] == "Read":
				d.Reads = n
			case f[1] == "Write":
				d.Writes = n
			}
		}
	}
	add(serviceBytes, true)
	add(serviced, false)
	out := make([]DeviceIO, 0, len(devs))
	for _, d := range devs {
		out = append(out, *d)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Major != out[j].Major {
			return out[i].Major < out[j].Major
		}
		return out[i].Minor < out[j].Minor
	})
	return out
}

// deviceName is a block device's /dev path as cAdvisor labels it, from
// sysfs; "" where sysfs does not know the device.
func deviceName(major, minor uint64) string {
	f, err := os.Open(fmt.Sprintf("/sys/dev/block/%d:%d/uevent", major, minor))
	if err != nil {
		return ""
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if name, ok := strings.CutPrefix(s.Text(), "DEVNAME="); ok {
			return "/dev/" + name
		}
	}
	return ""
}
