package main

import (
	"fmt"
	"strings"
)

// unit is berth.service for berth installed in bindir. Stopping or
// restarting berth must never touch a pod: KillMode=process stops berth
// alone, so the pods' own processes, which stay in the service's cgroup
// as containerd's shims do in containerd's, live on (systemd logs them as
// left over); the containers are in scopes or cgroups of their own.
func unit(bindir string) string {
	return fmt.Sprintf(`[Unit]
Description=berth container runtime (Kubernetes CRI)
Documentation=https://github.com/berth-runtime/berth/blob/main/docs/install.md
After=network.target local-fs.target dbus.service

[Service]
ExecStartPre=-/sbin/modprobe overlay
ExecStart=%s/berth
Type=notify
Delegate=yes
KillMode=process
Restart=always
RestartSec=5
LimitNPROC=infinity
LimitCORE=infinity
LimitNOFILE=infinity
TasksMax=infinity
OOMScoreAdjust=-999

[Install]
WantedBy=multi-user.target
`, bindir)
}

// shippedConfig is berth config default with what a systemd node needs: the
// systemd cgroup driver (the kubelet's default under kubeadm) and Debian's
// CNI plugin directory beside /opt/cni/bin.
func shippedConfig(def string) (string, error) {
	for _, r := range []struct{ old, new string }{
		{`cgroup_driver = "cgroupfs"`, `cgroup_driver = "systemd"`},
		{`bin_dirs = ["/opt/cni/bin"]`, `bin_dirs = ["/opt/cni/bin", "/usr/lib/cni"]`},
	} {
		if strings.Count(def, r.old) != 1 {
			return "", fmt.Errorf("berth config default: want one %q", r.old)
		}
		def = strings.Replace(def, r.old, r.new, 1)
	}
	return def, nil
}

const crictlYAML = `runtime-endpoint: unix:///run/berth/berth.sock
image-endpoint: unix:///run/berth/berth.sock
timeout: 10
`

// postinst: a berth that fails to start (no overlay module, a port taken)
// is logged by systemd and must not leave the package half-configured.
const postinst = `#!/bin/sh
set -e
if [ -d /run/systemd/system ]; then
	systemctl daemon-reload || true
	systemctl enable berth.service || true
	systemctl restart berth.service || echo "berth did not start: see journalctl -u berth" >&2
fi
exit 0
`

// prerm: on removal (not on upgrade, whose postinst restarts berth under
// the running pods) the pods go first, while berth still serves them.
// dpkg runs maintainer scripts with PATH=/usr/sbin:/usr/bin:/sbin:/bin, so
// a crictl from the cri-tools tarball in /usr/local/bin is looked for too.
const prerm = `#!/bin/sh
set -e
if [ "$1" = remove ] && [ -d /run/systemd/system ]; then
	PATH="$PATH:/usr/local/bin"
	if command -v crictl >/dev/null 2>&1 && systemctl is-active --quiet berth.service; then
		# A pod's stop waits for its CNI DEL, which on a slow node outlasts
		# crictl.yaml's 10 s when many pods go at once; a retry waits for
		# the DEL still under way instead of leaving its rules behind.
		n=0
		until crictl --runtime-endpoint unix:///run/berth/berth.sock --timeout 60s rmp --all --force; do
			n=$((n + 1))
			[ "$n" -lt 3 ] || break
		done
		# The slice of pods that name no parent (crictl's), which systemd
		# keeps once made: empty now.
		[ "$n" -lt 3 ] && systemctl stop berth.slice 2>/dev/null || true
	fi
	systemctl stop berth.service || true
	systemctl disable berth.service || true
fi
exit 0
`

// postrm purge: berth's state goes. /var/lib/berth may be a mount point
// (a disk of its own): its contents go, the mount stays.
const postrm = `#!/bin/sh
set -e
if [ "$1" = purge ]; then
	for d in /var/lib/berth /run/berth; do
		[ -d "$d" ] || continue
		for m in $(awk -v d="$d/" 'index($5, d) == 1 { print $5 }' /proc/self/mountinfo | sort -r); do
			umount -l "$m" || true
		done
		if mountpoint -q "$d"; then
			find "$d" -mindepth 1 -maxdepth 1 -exec rm -rf {} + || true
		else
			rm -rf "$d"
		fi
	done
	rmdir /etc/berth 2>/dev/null || true
fi
if [ -d /run/systemd/system ]; then
	systemctl daemon-reload || true
fi
exit 0
`
