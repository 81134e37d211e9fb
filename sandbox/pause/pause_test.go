package pause

import "testing"

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
