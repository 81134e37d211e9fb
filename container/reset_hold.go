package container

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/berth-runtime/berth/internal/netnsdo"
)

// A pod restored from a checkpoint that holds established TCP connections
// (CheckpointPod dumps them) gets its containers back one StartContainer
// at a time. When CRIU turns a restored socket's repair mode off, the
// kernel sends the peer a window probe; a connection between two
// containers of the pod whose other end is not restored yet has no
// socket at that address, the pod's loopback answers with a reset, and
// the connection is gone before its peer comes back. CRIU locks only a
// network namespace it restores itself (the pod's is external to the
// dump), so berth holds the resets back: from the create of the first
// container whose archive holds established connections until no
// container of the pod waits for its restore, the pod's network
// namespace drops the TCP resets sent on its loopback. A segment that
// reaches no socket meanwhile is dropped, not answered; TCP sends it
// again, and once the peer is restored it arrives.
//
// The rule is iptables' (and ip6tables'), the tool CRIU's own network
// lock runs: in the pod's OUTPUT chain, so it leaves with the pod's
// network namespace whatever becomes of berth.

// resetHoldComment marks berth's rule in the pod's OUTPUT chain.
const resetHoldComment = "berth: pod restore in progress"

// resetHoldRule is the rule's specification, after the chain.
var resetHoldRule = []string{"-o", "lo", "-p", "tcp", "--tcp-flags", "RST", "RST",
	"-m", "comment", "--comment", resetHoldComment, "-j", "DROP"}

// resetHoldTimeout bounds each iptables run (-w waits for the xtables
// lock, held by whoever else changes rules, CNI plugins among them).
const resetHoldTimeout = 30 * time.Second

// resetHolds adds and removes the rule. The rules in the pods' network
// namespaces are the only record of which pods are held: nothing to
// lose when berth restarts, nothing left over when a pod goes.
type resetHolds struct {
	// mu orders a hold against a release's look at the waiting
	// containers.
	mu sync.Mutex
	// run runs an iptables command in a network namespace; nil runs it.
	run func(netns, tool string, args ...string) error
}

// iptablesIn runs tool (iptables or ip6tables) with args in the network
// namespace pinned at netns.
func iptablesIn(netns, tool string, args ...string) error {
	bin, err := exec.LookPath(tool)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), resetHoldTimeout)
	defer cancel()
	// Started from the namespace's thread: the process is born in it.
	return netnsdo.Do(netns, func() error {
		out, err := exec.CommandContext(ctx, bin, append([]string{"-w"}, args...)...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("%s %s: %w: %s", tool, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
		}
		return nil
	})
}

func (h *resetHolds) iptables(netns, tool string, args ...string) error {
	if h.run != nil {
		return h.run(netns, tool, args...)
	}
	return iptablesIn(netns, tool, args...)
}

// hold adds the rule to the pod's network namespace netns, unless it is
// there: an earlier container of the pod, or berth before a restart,
// may have added it. IPv6 is held where the namespace has it. An error
// is IPv4's; added tells that IPv4's rule was not there.
func (h *resetHolds) hold(netns string) (added bool, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, tool := range []string{"iptables", "ip6tables"} {
		check := append([]string{"-C", "OUTPUT"}, resetHoldRule...)
		if h.iptables(netns, tool, check...) == nil {
			continue
		}
		err := h.iptables(netns, tool, append([]string{"-I", "OUTPUT"}, resetHoldRule...)...)
		if tool == "iptables" {
			if err != nil {
				return false, err
			}
			added = true
		}
	}
	return added, nil
}

// release removes the rule from the pod's network namespace netns
// unless waiting(), asked under the lock that hold takes, says that a
// container of the pod still waits for its restore. It removes every
// copy of the rule (and none is no error: the pod's namespace may be
// gone, or berth restarted after the rule was removed); removed tells
// whether one was there.
func (h *resetHolds) release(netns string, waiting func() bool) (removed bool, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if waiting() {
		return false, nil
	}
	var errs []error
	for _, tool := range []string{"iptables", "ip6tables"} {
		del := append([]string{"-D", "OUTPUT"}, resetHoldRule...)
		// -C first: -D of a rule that is not there is an error like
		// any other.
		for range 8 {
			if h.iptables(netns, tool, append([]string{"-C", "OUTPUT"}, resetHoldRule...)...) != nil {
				break
			}
			if err := h.iptables(netns, tool, del...); err != nil {
				errs = append(errs, err)
				break
			}
			removed = true
		}
	}
	return removed, errors.Join(errs...)
}

// holdResets holds the resets of pod's loopback back until its
// containers made from archives with established TCP connections are
// restored (the comment above). A pod on the host's network is not
// held: berth does not change the host's rules. A rule that cannot be
// added costs only the connections the restore would have carried on:
// logged, not an error.
func (s *Service) holdResets(podID, netns string) {
	if netns == "" {
		return
	}
	added, err := s.resets.hold(netns)
	if added {
		s.log.Info("pod restore with established TCP connections: its loopback's resets held back until its containers are restored", "pod", podID)
	}
	if err != nil {
		s.log.Warn("restoring a pod checkpoint with established TCP connections: cannot hold its loopback's resets back; a connection between its containers may be reset by the restore of one end before the other",
			"pod", podID, "error", err)
	}
}

// releaseResets ends the hold of the pod's resets once no container of
// the pod made from an archive with established TCP connections waits
// for its restore. rec is the container whose restore ended (restored,
// failed or stopped before).
func (s *Service) releaseResets(ctx context.Context, rec *Record) {
	if !rec.TCPEstablished {
		return
	}
	pod, err := s.opts.Pods.Pod(ctx, rec.PodID)
	if err != nil || pod.NetNSPath == "" {
		return
	}
	waiting := func() bool {
		for _, c := range s.podContainers(rec.PodID) {
			if r := c.snapshot(); r.TCPEstablished && restorePending(&r) && !c.isExited() {
				return true
			}
		}
		return false
	}
	removed, err := s.resets.release(pod.NetNSPath, waiting)
	if removed {
		s.log.Info("pod restore: no container waits for its restore, the loopback's resets flow again", "pod", rec.PodID, "container", rec.ID)
	}
	if err != nil {
		s.log.Warn("cannot end the hold of a restored pod's loopback resets", "pod", rec.PodID, "error", err)
	}
}
