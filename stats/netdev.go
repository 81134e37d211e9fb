package stats

import (
	"os"
	"strconv"
	"strings"

	"github.com/berth-runtime/berth/network"
)

// Iface is one network interface's counters.
type Iface struct {
	Name                                 string
	RxBytes, RxPackets, RxErrors, RxDrop uint64
	TxBytes, TxPackets, TxErrors, TxDrop uint64
}

// readNetDev reads the interface counters of the network namespace
// pinned at ns, from a thread inside it: /proc/thread-self/net/dev shows
// the reading thread's namespace. Loopback is left out.
func readNetDev(ns string) ([]Iface, error) {
	var data []byte
	err := network.Do(ns, func() error {
		var err error
		data, err = os.ReadFile("/proc/thread-self/net/dev")
		return err
	})
	if err != nil {
		return nil, err
	}
	return parseNetDev(string(data)), nil
}

// parseNetDev parses /proc/net/dev:
//
//	Inter-|   Receive                            ...|  Transmit
//	 face |bytes packets errs drop fifo frame compressed multicast|bytes packets errs drop ...
//	  eth0: 1296 16 0 0 0 0 0 0 1164 14 0 0 0 0 0 0
func parseNetDev(s string) []Iface {
	var out []Iface
	for _, line := range splitLines(s) {
		name, rest, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		name = strings.TrimSpace(name)
		f := strings.Fields(rest)
		if name == "lo" || len(f) < 16 {
			continue
		}
		n := func(i int) uint64 { v, _ := strconv.ParseUint(f[i], 10, 64); return v }
		out = append(out, Iface{
			Name:    name,
			RxBytes: n(0), RxPackets: n(1), RxErrors: n(2), RxDrop: n(3),
			TxBytes: n(8), TxPackets: n(9), TxErrors: n(10), TxDrop: n(11),
		})
	}
	return out
}

func splitLines(s string) []string { return strings.Split(strings.TrimSpace(s), "\n") }
