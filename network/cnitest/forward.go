package cnitest

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
)

// bridgeNFCallIPTables is the sysctl that sends bridged IPv4 frames
// through iptables (br_netfilter): with it on, traffic between two pods on
// one bridge passes the FORWARD chain.
const bridgeNFCallIPTables = "/proc/sys/net/bridge/bridge-nf-call-iptables"

// forwardLock orders the tests that change the host's forwarding.
const forwardLock = "/tmp/berth-test-forward.lock"

// DockerForwarding gives the host, for the rest of the test, what a host
// running dockerd with its defaults has: FORWARD policy DROP and bridge
// netfilter on (loading br_netfilter if it is a module not loaded yet).
// Both are put back exactly as they were when the test ends, failed or
// not; a br_netfilter this loaded is unloaded again.
//
// The change is host-wide: for its duration, forwarded traffic that no
// rule accepts is dropped for every process on the host. Tests that use
// it hold a lock, so two of them never save each other's DROP as the
// state to restore.
func DockerForwarding(t testing.TB) {
	t.Helper()
	if _, err := exec.LookPath("iptables"); err != nil {
		t.Skip("needs iptables")
	}
	// A fixed path, not $TMPDIR: every test process on the host must
	// find the same lock.
	lock, err := os.OpenFile(forwardLock, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		lock.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { lock.Close() }) // registered first: released last

	policy, err := forwardPolicy()
	if err != nil {
		t.Fatal(err)
	}
	loaded := false
	if _, err := os.Stat(bridgeNFCallIPTables); errors.Is(err, os.ErrNotExist) {
		if out, err := exec.Command("modprobe", "br_netfilter").CombinedOutput(); err != nil {
			t.Skipf("bridge netfilter: no %s and modprobe br_netfilter failed: %v: %s", bridgeNFCallIPTables, err, out)
		}
		loaded = true
	}
	nf, err := os.ReadFile(bridgeNFCallIPTables)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("iptables", "-P", "FORWARD", policy).CombinedOutput(); err != nil {
			t.Errorf("restore FORWARD policy %s: %v: %s", policy, err, out)
		}
		if loaded {
			if out, err := exec.Command("modprobe", "-r", "br_netfilter").CombinedOutput(); err != nil {
				t.Errorf("unload br_netfilter: %v: %s", err, out)
			}
		} else if err := os.WriteFile(bridgeNFCallIPTables, nf, 0o644); err != nil {
			t.Errorf("restore %s: %v", bridgeNFCallIPTables, err)
		}
	})
	if err := os.WriteFile(bridgeNFCallIPTables, []byte("1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("iptables", "-P", "FORWARD", "DROP").CombinedOutput(); err != nil {
		t.Fatalf("FORWARD policy DROP: %v: %s", err, out)
	}
	t.Logf("FORWARD policy DROP (was %s), bridge-nf-call-iptables 1 (was %s) until the test ends", policy, strings.TrimSpace(string(nf)))
}

// forwardPolicy reads the filter table's FORWARD policy (ACCEPT or DROP).
func forwardPolicy() (string, error) {
	out, err := exec.Command("iptables", "-S", "FORWARD").Output()
	if err != nil {
		return "", fmt.Errorf("iptables -S FORWARD: %w", err)
	}
	first, _, _ := strings.Cut(string(out), "\n")
	f := strings.Fields(first)
	if len(f) != 3 || f[0] != "-P" || f[1] != "FORWARD" {
		return "", fmt.Errorf("iptables -S FORWARD: no policy in %q", first)
	}
	return f[2], nil
}
