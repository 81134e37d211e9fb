package procstate

import (
	"bytes"
	"errors"
	"os"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// StartTime is pid's start time (clock ticks since boot, field 22 of
// /proc/PID/stat), 0 if it is gone: with the pid, it names one process,
// not a later one that reused the pid.
func StartTime(pid int) uint64 {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	v, _ := ParseStartTime(data)
	return v
}

// ParseStartTime reads field 22 of a /proc/PID/stat. The command name
// (field 2) may hold spaces and parentheses, so fields count from its
// closing ')'.
func ParseStartTime(stat []byte) (uint64, error) {
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, errors.New("malformed stat")
	}
	fields := bytes.Fields(stat[i+1:])
	// fields[0] is field 3 (state); field 22 is fields[19].
	if len(fields) < 20 {
		return 0, errors.New("malformed stat")
	}
	return strconv.ParseUint(string(fields[19]), 10, 64)
}

// KillWait is how long a SIGKILLed process may take to end.
const KillWait = 5 * time.Second

// Kill SIGKILLs pid through a pidfd and waits, KillWait at most, for its
// exit notification, so that the caller goes on once the kernel took it
// down.
func Kill(pid int) {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return
	}
	defer unix.Close(fd)
	if unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0) != nil {
		return
	}
	unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, int(KillWait/time.Millisecond))
}
