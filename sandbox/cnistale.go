package sandbox

import (
	"bytes"
	"log/slog"
	"os"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// cniDelTimeout bounds a CNI DEL, which goes on when its caller gives up.
const cniDelTimeout = 2 * time.Minute

// How long recovery lets the previous berth's CNI plugins finish, and
// then how long it tries to kill those that did not.
const (
	stalePluginWait = 20 * time.Second
	stalePluginKill = 10 * time.Second
)

// awaitStalePlugins waits for the CNI plugins that a berth killed in the
// middle of a call left running for pods (by their CNI_CONTAINERID), and
// for the programs they run (iptables, which inherits their environment).
// Recovery's own DEL must come after them: an ADD finishing later would
// leave its NAT rules and lease to nobody, and a DEL cut short leaves
// them for good (the bridge plugin finds a pod's addresses on the
// interface it deletes first). Plugins still running after
// stalePluginWait are killed.
func awaitStalePlugins(pods map[string]bool, log *slog.Logger) {
	if len(pods) == 0 {
		return
	}
	deadline := time.Now().Add(stalePluginWait)
	waited := false
	for len(stalePlugins(pods)) > 0 {
		if time.Now().After(deadline) {
			killStalePlugins(pods, log)
			return
		}
		if !waited {
			log.Warn("waiting for CNI plugins the previous berth left running", "max", stalePluginWait)
			waited = true
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// killStalePlugins kills them, scanning again until none is left: a plugin
// may start a child between a scan and its kill.
func killStalePlugins(pods map[string]bool, log *slog.Logger) {
	deadline := time.Now().Add(stalePluginKill)
	for time.Now().Before(deadline) {
		pids := stalePlugins(pods)
		if len(pids) == 0 {
			return
		}
		for _, pid := range pids {
			log.Warn("killing a CNI plugin the previous berth left running", "pid", pid, "command", commandOf(pid))
			unix.Kill(pid, syscall.SIGKILL)
		}
		for _, pid := range pids {
			for processRuns(pid) && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
		}
	}
	log.Error("CNI plugins of the previous berth still run", "after", stalePluginKill)
}

// stalePlugins lists the live processes whose CNI_CONTAINERID is one of
// pods. A zombie's environ reads empty (its memory is gone), so one read
// per process tells both.
func stalePlugins(pods map[string]bool) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		env, err := os.ReadFile("/proc/" + e.Name() + "/environ")
		if err != nil {
			continue
		}
		for _, kv := range bytes.Split(env, []byte{0}) {
			if id, ok := bytes.CutPrefix(kv, []byte("CNI_CONTAINERID=")); ok {
				if pods[string(id)] {
					pids = append(pids, pid)
				}
				break
			}
		}
	}
	return pids
}

func commandOf(pid int) string {
	b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm")
	return string(bytes.TrimSpace(b))
}

// processRuns reports whether pid exists and is not a zombie.
func processRuns(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')')
	return i < 0 || i+2 >= len(b) || b[i+2] != 'Z'
}
