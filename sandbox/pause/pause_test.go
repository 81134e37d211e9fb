package pause

import (
	"strings"
	"testing"
)

func TestSysctlPath(t *testing.T) {
	tests := map[string]string{
		"net.ipv4.ip_forward":                   "/proc/sys/net/ipv4/ip_forward",
		"kernel.shm_rmid_forced":                "/proc/sys/kernel/shm_rmid_forced",
		"net/ipv4/conf/eth0.100/forwarding":     "/proc/sys/net/ipv4/conf/eth0.100/forwarding",
		"net.ipv4.ip_local_port_range/../../..": "/proc/sys",
		"../../etc/passwd":                      "/proc/sys/etc/passwd",
	}
	for name, want := range tests {
		if got := SysctlPath(name); got != want {
			t.Errorf("SysctlPath(%q) = %q, want %q", name, got, want)
		}
	}
}

func TestArgsRoundTrip(t *testing.T) {
	spec := Spec{Hostname: "pod-a", Sysctls: map[string]string{
		"net.ipv4.ip_unprivileged_port_start": "0",
		"kernel.shm_rmid_forced":              "1",
		"net/ipv4/conf/eth0.100/forwarding":   "1",
		"net.ipv4.ip_local_port_range":        "1024 65000",
	}}
	args := spec.Args()
	want := []string{"-h", "pod-a",
		"-s", "kernel/shm_rmid_forced=1",
		"-s", "net/ipv4/ip_local_port_range=1024 65000",
		"-s", "net/ipv4/ip_unprivileged_port_start=0",
		"-s", "net/ipv4/conf/eth0.100/forwarding=1",
	}
	if strings.Join(args, "|") != strings.Join(want, "|") {
		t.Fatalf("Args() = %q, want %q", args, want)
	}
	got, err := ParseArgs(args)
	if err != nil {
		t.Fatal(err)
	}
	if got.Hostname != "pod-a" || len(got.Sysctls) != 4 {
		t.Fatalf("ParseArgs = %+v", got)
	}
	// Parsed names are /proc/sys paths; SysctlPath maps them to the files
	// the original names map to.
	for name, value := range spec.Sysctls {
		rel := strings.TrimPrefix(SysctlPath(name), "/proc/sys/")
		if got.Sysctls[rel] != value || SysctlPath(rel) != SysctlPath(name) {
			t.Errorf("%s: parsed %q=%q", name, rel, got.Sysctls[rel])
		}
	}
	for _, bad := range [][]string{{"-h"}, {"-x", "y"}, {"-s", "novalue"}, {"-s", "/proc/sys/kernel/x=1"}, {"-s", "=1"}} {
		if _, err := ParseArgs(bad); err == nil {
			t.Errorf("ParseArgs(%q) succeeded", bad)
		}
	}
}
