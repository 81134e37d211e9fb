# Sourced by the kind suites of the test bed's VM (kind-suite, node-boot),
# which run from /job/in: the bundle's tools on PATH, its env exported,
# PASS/FAIL lines in /job/out/results.txt, figures in /job/out/figures.txt,
# and setup, which starts Docker and loads the bundle's images.
set -uo pipefail
[[ -n "${KIND_TRACE:-}" ]] && set -x
B="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
OUT=/job/out
export PATH="$B/bin:$PATH"
set -a
source "$B/env"
set +a
RES="$OUT/results.txt" FIG="$OUT/figures.txt"
failed=0
log() { echo "$(basename "$0"): $(date +%T) $*"; }
pass() { echo "PASS $*" | tee -a "$RES"; }
fail() { echo "FAIL $*" | tee -a "$RES"; failed=1; }
check() { # check NAME CMD...: PASS when CMD succeeds
	local name="$1"
	shift
	if "$@"; then pass "$name"; else fail "$name"; fi
}
figure() { echo "$*" | tee -a "$FIG"; }
trap 'journalctl --no-pager -o short-monotonic >"$OUT/journal.log" 2>&1 || true' EXIT

# setup grows the root file system to the disk hack/vm gave, starts
# Docker and loads the node images and the test image.
setup() {
	resize2fs -f /dev/vda >/dev/null 2>&1 || log "resize2fs /dev/vda failed"
	df -h / /job | sed 's/^/  /'
	check "host is cgroup v2" test "$(stat -fc %T /sys/fs/cgroup)" = cgroup2fs
	# Docker's data root on the host's cache disk, when there is one: the
	# images loaded by an earlier run are there already.
	if [[ -b /dev/vdc ]]; then
		systemctl stop docker.socket docker.service
		mount /dev/vdc /var/lib/docker
	fi
	systemctl start docker
	local i
	for ((i = 0; i < 120; i++)); do docker info >/dev/null 2>&1 && break; sleep 1; done
	figure "docker: $(docker version --format '{{.Server.Version}}'), cgroup $(docker info --format '{{.CgroupVersion}} driver {{.CgroupDriver}}')"
	# What an interrupted run left: its kind nodes, their volumes.
	docker rm -f $(docker ps -aq --filter label=io.x-k8s.kind.cluster) >/dev/null 2>&1
	docker volume prune -f >/dev/null 2>&1
	local tar s want
	for tar in "$B"/images/*.tar; do
		want="$(sed -n 's/^'"$(basename "$tar" .tar)"'=//p' "$B/images/tags")"
		if [[ -n "$want" ]] && docker image inspect "$want" >/dev/null 2>&1; then
			log "$want: loaded by an earlier run"
			continue
		fi
		s=$SECONDS
		docker load -i "$tar" >/dev/null || fail "docker load $(basename "$tar")"
		figure "docker load $(basename "$tar") ($(du -m "$tar" | cut -f1) MiB): $((SECONDS - s)) s"
		rm -f "$tar" # room on the job disk
	done
	# Node images of older builds: only this run's stay in the cache.
	docker images --format '{{.Repository}}:{{.Tag}}' | grep '^berth/node' | grep -vxF -f <(cut -d= -f2 "$B/images/tags") |
		xargs -r docker rmi >/dev/null 2>&1
}

on() { docker exec "$1" bash -c "$2"; }
