package runtimeharness

import (
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/berth-runtime/berth/test/hostcheck"
	"github.com/berth-runtime/berth/test/kubehost"
)

// Leaks counts what a run left on the host that it should not have, each
// logged as "LEAK: ..." when found; the removers below count what they
// find and remove it.
type Leaks struct {
	log *slog.Logger
	n   int
}

// NewLeaks returns a count of none that logs to log.
func NewLeaks(log *slog.Logger) *Leaks { return &Leaks{log: log} }

// Add logs one leak.
func (l *Leaks) Add(what string, args ...any) {
	l.log.Error("LEAK: "+what, args...)
	l.n++
}

// AddLogged adds n leaks that a remover logged itself.
func (l *Leaks) AddLogged(n int) { l.n += n }

// Count is the number of leaks so far.
func (l *Leaks) Count() int { return l.n }

// KillProcs kills the processes, each a leak.
func (l *Leaks) KillProcs(pids []int) {
	for _, pid := range pids {
		l.Add("process left: killed", "pid", pid, "cmdline", hostcheck.Cmdline(pid))
		_ = unix.Kill(pid, unix.SIGKILL)
	}
}

// Unmount detaches the mounts (deepest first, as hostcheck.MountsUnder
// lists them), each a leak unless expected says it is one the run always
// leaves.
func (l *Leaks) Unmount(mounts []string, expected func(mount string) bool) {
	for _, m := range mounts {
		if expected == nil || !expected(m) {
			l.Add("mount left: unmounted", "path", m)
		}
		if err := unix.Unmount(m, unix.MNT_DETACH); err != nil {
			l.Add("could not unmount", "path", m, "error", err)
		}
	}
}

// DeleteNATRules deletes the nat rules naming s (a pod subnet's prefix:
// masquerade, portmap), each a leak. The error is iptables' when the
// rules cannot be listed.
func (l *Leaks) DeleteNATRules(s string) error {
	rules, err := kubehost.DeleteNATRulesNaming(s)
	for _, r := range rules {
		l.Add("iptables rule naming the pod subnet left: deleted", "rule", r)
	}
	return err
}

// DeleteLinks deletes the run's own interfaces that exist (not leaks: the
// run made them); one that cannot be deleted is.
func (l *Leaks) DeleteLinks(links ...string) {
	for _, name := range links {
		if _, err := net.InterfaceByName(name); err != nil {
			continue
		}
		if out, err := exec.Command("ip", "link", "del", name).CombinedOutput(); err != nil {
			l.Add("could not delete link", "link", name, "error", err, "out", strings.TrimSpace(string(out)))
		}
	}
}

// RemoveWorkDir removes the run's temp dir, made by os.MkdirTemp in the
// temp dir, unless a mount is left under it (removing would reach into
// what is mounted: a leak, the dir is kept). Any other path is refused.
func (l *Leaks) RemoveWorkDir(work string) {
	if !isTempDir(work) {
		l.log.Error("not a temp dir of the run: kept", "dir", work)
		return
	}
	if len(hostcheck.MountsUnder(work)) > 0 {
		l.Add("mounts remain under the work dir: kept", "dir", work)
		return
	}
	_ = os.RemoveAll(work)
}

// isTempDir says whether dir is a directory right under the temp dir
// (os.TempDir or /tmp), where os.MkdirTemp makes a run's.
func isTempDir(dir string) bool {
	if !filepath.IsAbs(dir) || filepath.Clean(dir) != dir {
		return false
	}
	parent := filepath.Dir(dir)
	return dir != parent && (parent == filepath.Clean(os.TempDir()) || parent == "/tmp")
}

var objectID = regexp.MustCompile(`[0-9a-f]{64}`)

// IDsIn lists the 64-hex ids (pods, containers) named in a runtime's log
// and in the names of the files under dir, a state dir naming every object
// not removed ("": none).
func IDsIn(logPath, dir string) map[string]bool {
	ids := map[string]bool{}
	if text, err := os.ReadFile(logPath); err == nil {
		for _, id := range objectID.FindAllString(string(text), -1) {
			ids[id] = true
		}
	}
	if dir == "" {
		return ids
	}
	_ = filepath.WalkDir(dir, func(_ string, d os.DirEntry, err error) error {
		if err == nil {
			for _, id := range objectID.FindAllString(d.Name(), -1) {
				ids[id] = true
			}
		}
		return nil
	})
	return ids
}

// NetFree fails if an address or route of the host starts with prefix
// ("10.219."), the range of a run's node IP and pod network.
func NetFree(prefix string) error {
	for _, args := range [][]string{{"-o", "-4", "addr"}, {"-4", "route", "show", "table", "all"}} {
		out, err := exec.Command("ip", args...).Output()
		if err != nil {
			return fmt.Errorf("ip %s: %w", strings.Join(args, " "), err)
		}
		if line := lineNaming(string(out), prefix); line != "" {
			return fmt.Errorf("%s0.0/16 is in use on this host (%s): is another run up?", prefix, line)
		}
	}
	return nil
}

// lineNaming is the first line of ip's output with an address starting
// with prefix.
func lineNaming(out, prefix string) string {
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, " "+prefix) || strings.HasPrefix(line, prefix) {
			return line
		}
	}
	return ""
}

// AddNodeIP puts addr (/32) on a new empty bridge named link: the
// kubelet refuses a loopback node IP, and this kernel may lack the dummy
// module.
func AddNodeIP(link, addr string) error {
	for _, args := range [][]string{
		{"link", "add", link, "type", "bridge"},
		{"addr", "add", addr + "/32", "dev", link},
		{"link", "set", link, "up"},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, out)
		}
	}
	return nil
}
