// Command iptables-wrapper is iptables, iptables-save, iptables-restore and
// their ip6tables twins in the kind node images that program the node's
// netfilter (kube-proxy and flannel, hack/kind-images). Those images carry both
// of Debian's back ends, xtables-legacy-multi and xtables-nft-multi, because
// a container must write its rules where the node's own rules are: legacy and
// nft tables are separate in the kernel, and a packet runs through both, so
// kube-proxy's service rules in one and the node's (Docker's DNS, the
// kubelet's) in the other interact in ways nobody reads from one iptables-save.
//
// The node decides: its entrypoint picks a back end and the kubelet then makes
// its KUBE-IPTABLES-HINT chain in the mangle table of that one. On its first
// run the wrapper looks for that chain (or, before the kubelet ran, counts
// the rules in each back end), points every iptables name at the chosen
// xtables-*-multi, so later calls no longer come here, and execs it.
package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"time"
)

// sbin is where Debian's iptables package puts its commands.
const sbin = "/usr/sbin"

// names are the commands the wrapper stands for; each becomes a symlink to
// the chosen back end.
var names = []string{"iptables", "iptables-save", "iptables-restore", "ip6tables", "ip6tables-save", "ip6tables-restore"}

// hints are the chains the kubelet makes in the mangle table of the back end
// the node uses, as iptables-save declares them.
var hints = [][]byte{[]byte(":KUBE-IPTABLES-HINT "), []byte(":KUBE-KUBELET-CANARY ")}

func main() {
	name := filepath.Base(os.Args[0])
	if !slices.Contains(names, name) {
		fmt.Fprintf(os.Stderr, "iptables-wrapper: run me as one of %v (a symlink), not as %q\n", names, name)
		os.Exit(2)
	}
	mode := choose(save("nft"), save("legacy"))
	multi := filepath.Join(sbin, "xtables-"+mode+"-multi")
	// A read-only root only costs the detection on every call.
	_ = install(sbin, "xtables-"+mode+"-multi")
	err := syscall.Exec(multi, append([]string{name}, os.Args[1:]...), os.Environ())
	fmt.Fprintf(os.Stderr, "iptables-wrapper: exec %s: %v\n", multi, err)
	os.Exit(1)
}

// save returns what the back end's iptables-save and ip6tables-save print.
// Whole dumps, not -t mangle: legacy iptables-save -t makes the table it is
// asked for. An error (a kernel without that back end) leaves what it
// printed, usually nothing: that back end then has no rules and no hint.
func save(mode string) []byte {
	var out []byte
	for _, cmd := range []string{"iptables-save", "ip6tables-save"} {
		out = append(out, run(mode, cmd)...)
	}
	return out
}

func run(mode, name string) []byte {
	// nft can hang on an old kernel; legacy answers at once or not at all.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(sbin, "xtables-"+mode+"-multi"))
	cmd.Args[0] = name
	out, _ := cmd.Output()
	return out
}

// choose returns "nft" or "legacy": the back end with the kubelet's hint
// chain, else the one with more rules, nft on a tie (Debian's default, and
// what a node with no rules at all should start with).
func choose(nft, legacy []byte) string {
	hinted := func(dump []byte) bool {
		return slices.ContainsFunc(hints, func(h []byte) bool { return bytes.Contains(dump, h) })
	}
	switch {
	case hinted(nft):
		return "nft"
	case hinted(legacy):
		return "legacy"
	case rules(legacy) > rules(nft):
		return "legacy"
	}
	return "nft"
}

// rules counts the rules (the -A lines) of an iptables-save dump.
func rules(dump []byte) int {
	n := 0
	for line := range bytes.Lines(dump) {
		if bytes.HasPrefix(line, []byte("-A ")) {
			n++
		}
	}
	return n
}

// install points every name in dir at target, each by a symlink made beside it
// and renamed over it, so a concurrent caller sees the old or the new link.
func install(dir, target string) error {
	for _, n := range names {
		p := filepath.Join(dir, n)
		tmp := p + ".iptables-wrapper"
		os.Remove(tmp)
		if err := os.Symlink(target, tmp); err != nil {
			return err
		}
		if err := os.Rename(tmp, p); err != nil {
			os.Remove(tmp)
			return err
		}
	}
	return nil
}
