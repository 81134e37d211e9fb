package container

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/berth-runtime/berth/internal/netnsdo"
	"github.com/berth-runtime/berth/network"
)

// fakeIPTables answers the -C of the rules in rules (tool: count), adds
// on -I and removes on -D, and logs every call.
type fakeIPTables struct {
	rules map[string]int
	calls []string
	fail  map[string]error // by tool
}

func (f *fakeIPTables) run(netns, tool string, args ...string) error {
	f.calls = append(f.calls, tool+" "+args[0])
	if err := f.fail[tool]; err != nil {
		return err
	}
	if !slices.Equal(args[1:], append([]string{"OUTPUT"}, resetHoldRule...)) {
		return errors.New("not the rule")
	}
	switch args[0] {
	case "-C":
		if f.rules[tool] == 0 {
			return errors.New("no such rule")
		}
	case "-I":
		f.rules[tool]++
	case "-D":
		if f.rules[tool] == 0 {
			return errors.New("no such rule")
		}
		f.rules[tool]--
	}
	return nil
}

func TestResetHolds(t *testing.T) {
	f := &fakeIPTables{rules: map[string]int{}}
	h := &resetHolds{run: f.run}
	if added, err := h.hold("/run/netns/p1"); err != nil || !added {
		t.Fatalf("hold: %v, %v", added, err)
	}
	if added, err := h.hold("/run/netns/p1"); err != nil || added {
		t.Fatalf("second hold: %v, %v", added, err)
	}
	if f.rules["iptables"] != 1 || f.rules["ip6tables"] != 1 {
		t.Fatalf("held twice: rules %v, want one each (calls %v)", f.rules, f.calls)
	}
	if _, err := h.release("/run/netns/p1", func() bool { return true }); err != nil || f.rules["iptables"] != 1 {
		t.Fatalf("released while a container waits: %v, rules %v", err, f.rules)
	}
	if removed, err := h.release("/run/netns/p1", func() bool { return false }); err != nil || !removed || f.rules["iptables"] != 0 || f.rules["ip6tables"] != 0 {
		t.Fatalf("release: %v, %v, rules %v", removed, err, f.rules)
	}
	// Released with nothing there (a second release, or after a
	// restart): no error.
	if removed, err := h.release("/run/netns/p1", func() bool { return false }); err != nil || removed {
		t.Fatalf("second release: %v, %v", removed, err)
	}

	// A rule added before a restart is not added again, and goes with
	// the release, every copy of it.
	f.rules["iptables"], f.calls = 2, nil
	h = &resetHolds{run: f.run}
	if _, err := h.hold("/run/netns/p1"); err != nil || f.rules["iptables"] != 2 {
		t.Fatalf("hold over an existing rule: %v, rules %v", err, f.rules)
	}
	if _, err := h.release("/run/netns/p1", func() bool { return false }); err != nil || f.rules["iptables"] != 0 {
		t.Fatalf("release: %v, rules %v", err, f.rules)
	}

	// Without IPv6 in the namespace, IPv4 is held; without iptables,
	// nothing is, and the error says so.
	f = &fakeIPTables{rules: map[string]int{}, fail: map[string]error{"ip6tables": errors.New("no IPv6")}}
	h = &resetHolds{run: f.run}
	if _, err := h.hold("/run/netns/p1"); err != nil || f.rules["iptables"] != 1 {
		t.Fatalf("hold without ip6tables: %v, rules %v", err, f.rules)
	}
	f = &fakeIPTables{rules: map[string]int{}, fail: map[string]error{"iptables": errors.New("iptables: not found")}}
	h = &resetHolds{run: f.run}
	if _, err := h.hold("/run/netns/p1"); err == nil || !strings.Contains(err.Error(), "not found") {
		t.Fatalf("hold without iptables: %v", err)
	}
}

// repairedSocket makes what CRIU makes of a dumped TCP socket: a
// connection from local to remote on 127.0.0.1 with the given sequence
// numbers, set up in repair mode (no handshake), then taken out of it,
// which sends the peer a window probe.
func repairedSocket(local, remote, sendSeq, recvSeq int) (int, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	const recvQueue, sendQueue = 1, 2 // TCP_RECV_QUEUE, TCP_SEND_QUEUE
	lo := [4]byte{127, 0, 0, 1}
	steps := []func() error{
		func() error { return unix.SetsockoptInt(fd, unix.SOL_TCP, unix.TCP_REPAIR, 1) },
		func() error { return unix.SetsockoptInt(fd, unix.SOL_TCP, unix.TCP_REPAIR_QUEUE, sendQueue) },
		func() error { return unix.SetsockoptInt(fd, unix.SOL_TCP, unix.TCP_QUEUE_SEQ, sendSeq) },
		func() error { return unix.SetsockoptInt(fd, unix.SOL_TCP, unix.TCP_REPAIR_QUEUE, recvQueue) },
		func() error { return unix.SetsockoptInt(fd, unix.SOL_TCP, unix.TCP_QUEUE_SEQ, recvSeq) },
		func() error { return unix.Bind(fd, &unix.SockaddrInet4{Port: local, Addr: lo}) },
		func() error { return unix.Connect(fd, &unix.SockaddrInet4{Port: remote, Addr: lo}) },
		func() error { return unix.SetsockoptInt(fd, unix.SOL_TCP, unix.TCP_REPAIR, 0) },
		func() error {
			return unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Sec: 5})
		},
	}
	for i, step := range steps {
		if err := step(); err != nil {
			unix.Close(fd)
			return -1, fmt.Errorf("repaired socket, step %d: %w", i, err)
		}
	}
	return fd, nil
}

// The hold in a real network namespace: one end of a loopback
// connection restored while the other is not yet is reset without it,
// and carries on with it once the other end is back and the hold ends.
func TestResetHoldNetNS(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: network namespaces and TCP repair mode")
	}
	if _, err := exec.LookPath("iptables"); err != nil {
		t.Skip("no iptables")
	}
	ns, err := network.NewNetNS(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, held := range []bool{false, true} {
		id := "unheld"
		if held {
			id = "held"
		}
		pin, err := ns.Create(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ns.Remove(ctx, pin) })
		h := &resetHolds{}
		if held {
			if _, err := h.hold(pin); err != nil {
				t.Fatalf("hold: %v", err)
			}
			if err := iptablesIn(pin, "iptables", append([]string{"-C", "OUTPUT"}, resetHoldRule...)...); err != nil {
				t.Fatalf("the rule is not in the namespace: %v", err)
			}
		}
		var got string
		err = netnsdo.Do(pin, func() error {
			a, err := repairedSocket(5000, 6000, 1000, 5000)
			if err != nil {
				return err
			}
			defer unix.Close(a)
			time.Sleep(200 * time.Millisecond)
			// Written while the peer is not there.
			if _, err := unix.Write(a, []byte("early ")); err != nil {
				return err
			}
			time.Sleep(300 * time.Millisecond)
			b, err := repairedSocket(6000, 5000, 5000, 1000)
			if err != nil {
				return err
			}
			defer unix.Close(b)
			if _, err := unix.Write(a, []byte("late")); err != nil {
				return err
			}
			buf := make([]byte, 64)
			for n := 0; !strings.Contains(got, "late"); {
				if n, err = unix.Read(b, buf); n <= 0 {
					return err
				}
				got += string(buf[:n])
			}
			return nil
		})
		if held {
			if err != nil || got != "early late" {
				t.Errorf("held: %q, %v; want both writes through one connection", got, err)
			}
			if _, err := h.release(pin, func() bool { return false }); err != nil {
				t.Errorf("release: %v", err)
			}
			if err := iptablesIn(pin, "iptables", append([]string{"-C", "OUTPUT"}, resetHoldRule...)...); err == nil {
				t.Errorf("the rule is still there after the release")
			}
		} else if !errors.Is(err, unix.ECONNRESET) && !errors.Is(err, unix.EPIPE) {
			t.Errorf("not held: %q, %v; want the first end reset", got, err)
		} else {
			t.Logf("not held: %v", err)
		}
	}
}

// onePod is a pod with a network namespace.
type onePod struct{ netns string }

func (p onePod) Pod(_ context.Context, id string) (*Pod, error) {
	pod := &Pod{Ready: true}
	pod.ID, pod.NetNSPath = id, p.netns
	return pod, nil
}

// The hold ends with the restore of the last container of the pod made
// from an archive with established connections, whether restored or
// stopped before; containers of other pods, or without established
// connections, or restored already, do not keep it.
func TestReleaseResets(t *testing.T) {
	f := &fakeIPTables{rules: map[string]int{}}
	s := &Service{opts: Options{Pods: onePod{netns: "/run/netns/p1"}}, ctrs: map[string]*ctr{}, resets: resetHolds{run: f.run}}
	s.log = slog.New(slog.NewTextHandler(io.Discard, nil))
	add := func(id, pod string, tcp bool, state State) *ctr {
		c := &ctr{rec: Record{ID: id, PodID: pod, Restore: true, TCPEstablished: tcp, State: state}, exited: make(chan struct{})}
		s.ctrs[id] = c
		return c
	}
	a := add("a", "p1", true, StateCreated)
	b := add("b", "p1", true, StateCreated)
	add("plain", "p1", false, StateCreated)
	add("elsewhere", "p2", true, StateCreated)
	s.holdResets("p1", "/run/netns/p1")
	s.holdResets("p2", "") // the host's network: not held
	if f.rules["iptables"] != 1 || f.rules["ip6tables"] != 1 {
		t.Fatalf("held: rules %v", f.rules)
	}
	a.rec.State, a.rec.Pid = StateRunning, 10
	s.releaseResets(context.Background(), &a.rec)
	if f.rules["iptables"] != 1 {
		t.Fatalf("released while b waits for its restore")
	}
	close(b.exited) // stopped before its restore
	s.releaseResets(context.Background(), &b.rec)
	if f.rules["iptables"] != 0 || f.rules["ip6tables"] != 0 {
		t.Fatalf("not released once no container waits: rules %v", f.rules)
	}
	// A container without established connections never asks.
	f.calls = nil
	plain := s.ctrs["plain"].rec
	s.releaseResets(context.Background(), &plain)
	if len(f.calls) != 0 {
		t.Errorf("a restore without established connections ran %v", f.calls)
	}
}
