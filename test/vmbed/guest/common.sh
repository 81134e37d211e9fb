# Sourced by the guest suites that install berth's .deb (install-suite,
# kubeadm-suite) in the test bed's VM, from /job/in: logging, the tools a
# user has beside the package, the test images' registry, and the check of
# what a purge leaves behind.
B="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
OUT=/job/out
REG=127.0.0.1:5005
log() { echo "${SUITE:-suite}: $(date +%T) $*"; }
fail() { log "FAIL: $*"; exit 1; }
set -a
source "$B/env"
set +a

# user_tools installs crictl from cri-tools' tarball in /usr/local/bin (the
# package's prerm looks there) and the CNI plugins in /opt/cni/bin.
user_tools() {
	install -m 0755 "$B/bin/crictl" /usr/local/bin/crictl
	mkdir -p /opt/cni/bin
	cp "$B"/cni/* /opt/cni/bin/
}

# start_registry serves the test images at $REG inside the VM (it has no
# network).
start_registry() {
	mkdir -p "$(dirname "$HOST_BERTH_IMAGES")" /var/lib/registry
	ln -sfn "$B/images" "$HOST_BERTH_IMAGES"
	cat >/etc/registry.yml <<EOC
version: 0.1
log: {level: warn, accesslog: {disabled: true}}
storage: {filesystem: {rootdirectory: /var/lib/registry}}
http: {addr: $REG, secret: berth-vm}
EOC
	OTEL_SDK_DISABLED=true OTEL_TRACES_EXPORTER=none setsid "$B/bin/registry" serve /etc/registry.yml >"$OUT/registry.log" 2>&1 </dev/null &
	for ((i = 0; i < 100; i++)); do
		(exec 3<>"/dev/tcp/${REG%:*}/${REG#*:}") 2>/dev/null && break
		sleep 0.2
	done
	"$B/bin/mkimage" push -images "$B/images" -registry "$REG"
}

# check_leftovers lists what is left on the host after a purge in
# $OUT/leftovers.txt (for docs/install.md: berth0, the conflist and the
# shared CNI chains are expected) and fails on anything of a pod. The
# test bed's own job unit (berth-vm-job) is not berth's.
check_leftovers() {
	{
		echo "## mounts"; grep -E 'berth|overlay|/run/netns' /proc/self/mountinfo || true
		echo "## netns"; ls -A /run/netns 2>/dev/null || true
		echo "## cgroups"; find /sys/fs/cgroup -name '*berth*' ! -name 'berth-vm-job*' | head -50
		echo "## links"; ip -br link
		echo "## cni"; ls -A /etc/cni/net.d /var/lib/cni 2>/dev/null || true
		echo "## iptables"; iptables-save; ip6tables-save 2>/dev/null | grep -E '^[:-]' || true
		echo "## processes"; ps -eo pid,ppid,comm,args | grep -E "berth|${LEFTOVER_PROCS:-sleep}|busybox|pause" | grep -vE 'grep|berth-vm-job' || true
	} >"$OUT/leftovers.txt" 2>&1
	cat "$OUT/leftovers.txt"
	local bad=0
	grep -qE 'berth|overlay' /proc/self/mountinfo && { log "mounts left"; bad=1; }
	[[ -n "$(ls -A /run/netns 2>/dev/null)" ]] && { log "network namespaces left"; bad=1; }
	[[ -n "$(find /sys/fs/cgroup -name '*berth*' ! -name 'berth-vm-job*')" ]] && { log "cgroups left"; bad=1; }
	ps -eo args= | grep -E "berth|${LEFTOVER_PROCS:-sleep}" | grep -qvE 'grep|berth-vm-job' && { log "processes left"; bad=1; }
	iptables-save | grep -E -- '-A CNI-[0-9a-f]{20,}|-A CNI-DN-|-A CNI-HOSTPORT-DNAT ' && { log "pod iptables rules left"; bad=1; }
	((bad == 0)) || fail "the purge left pieces of pods (see leftovers.txt)"
}

# purge_berth removes, then purges the package, checking that the
# service stops, the config outlives the remove and the purge takes
# berth's own files.
purge_berth() {
	local s=$SECONDS p
	apt-get remove -y -q berth
	log "removed in $((SECONDS - s))s"
	systemctl is-active -q berth && fail "berth still active after apt-get remove"
	[[ -f /etc/berth/config.toml ]] || fail "apt-get remove took the config"
	apt-get purge -y -q berth
	for p in /var/lib/berth /run/berth /etc/berth /etc/crictl.yaml /usr/bin/berth; do
		[[ -e $p ]] && fail "$p is left after the purge"
	done
	return 0
}
