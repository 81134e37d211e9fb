# Sourced by hack/build-images, hack/kind-images and hack/e2e-images: helpers
# that make image root filesystems from the .debs hack/install-deps downloads
# and from Go programs, and check them in a throw-away chroot.

# The .debs of the userland of the Kubernetes e2e images agnhost and
# glibc-dns-testing (hack/e2e-images; hack/install-deps downloads them): curl,
# dig, nc, ip/ss, bash, hostname, getent, and every library they load.
E2E_DEB_PACKAGES=(curl bind9-dnsutils netcat-openbsd iproute2 bash hostname libc-bin
	libcurl4 bind9-libs libbpf1 libbrotli1 libcap2 libcom-err2 libelf1 libffi8 libfstrm0
	libgnutls30 libgssapi-krb5-2 libhogweed6 libicu72 libidn2-0 libjemalloc2 libjson-c5
	libk5crypto3 libkeyutils1 libkrb5-3 libkrb5support0 libldap-2.5-0 liblmdb0 liblzma5
	libmaxminddb0 libnettle8 libnghttp2-14 libp11-kit0 libpcre2-8-0 libprotobuf-c1 libpsl5
	librtmp1 libsasl2-2 libselinux1 libssh2-1 libssl3 libstdc++6 libtasn1-6 libtirpc3
	libtirpc-common libunistring2 libuv1 libxml2 libzstd1 zlib1g)

# deb_path PACKAGE: the newest downloaded .deb of PACKAGE.
deb_path() {
	compgen -G "$BERTH_DEBS/${1}_*.deb" | sort | tail -1
}

# extract_debs DIR PACKAGE...: unpacks the packages' files (not their scripts) into DIR.
extract_debs() {
	local dir="$1" p; shift
	mkdir -p "$dir"
	for p in "$@"; do dpkg-deb -x "$(deb_path "$p")" "$dir"; done
}

# copy_libs ROOTFS BASE STAGE BINARY...: copies every shared library the binaries
# load (by ldd, dereferenced) into the rootfs at the path the loader looks for
# it. /usr/lib/... goes to /lib/... (the busybox rootfs has no /usr/lib). A
# library is looked up in STAGE first (a directory .debs were extracted into, or
# ""), then on the host (the Debian 12 host and the .debs are the same
# release). Libraries the layer underneath already has (BASE, or "") are
# skipped, so that a layer on busybox does not carry a second libc.
copy_libs() {
	local root="$1" base="$2" stage="$3" bin lib dst ldpath=""; shift 3
	[[ -n "$stage" ]] && ldpath="$stage/usr/lib/x86_64-linux-gnu:$stage/lib/x86_64-linux-gnu"
	for bin in "$@"; do
		while read -r lib; do
			dst="$lib"
			[[ -n "$stage" && "$dst" == "$stage"/* ]] && dst="${dst#"$stage"}"
			dst="${dst/#\/usr\/lib\//\/lib\/}"
			[[ -e "$root$dst" || ( -n "$base" && -e "$base$dst" ) ]] && continue
			mkdir -p "$root$(dirname "$dst")"
			cp -L "$lib" "$root$dst"
			chmod 0755 "$root$dst"
		done < <(LD_LIBRARY_PATH="$ldpath" ldd "$bin" | grep -o '/[^ ]*')
	done
}

# go_static OUT PACKAGE: a static, stripped, reproducible build of one of the
# programs under test/images (no VCS stamp, so a commit does not change it).
go_static() {
	(cd "$BERTH_ROOT_DIR" && CGO_ENABLED=0 go build -trimpath -buildvcs=false -ldflags '-s -w' -o "$1" "$2")
}

# in_rootfs_exec LAYERS ARGV...: runs ARGV (no shell needed) in the root
# filesystem made of LAYERS (directories, colon-separated, top first, as
# overlayfs's lowerdir), through an overlay whose upper directory is a tmpfs,
# in private PID, mount and network namespaces (lo up), with /dev (tmpfs,
# /dev/null, /dev/std*), /proc and /run: nothing the check writes ends up in
# the layers. ARGV runs as root, or as $IN_ROOTFS_USER (uid:gid) when that is set.
in_rootfs_exec() {
	local layers="$1" w rc=0; shift
	w="$(mktemp -d)"
	# shellcheck disable=SC2086 # IN_ROOTFS_WRAP is a command line (foreignarch)
	IN_ROOTFS_USER="${IN_ROOTFS_USER:-}" ${IN_ROOTFS_WRAP:-} unshare -m -p -n -f sh -c '
		set -e
		layers="$1" w="$2"; shift 2
		mount --make-rprivate /
		ip link set lo up
		mount -t tmpfs tmpfs "$w"
		mkdir "$w/upper" "$w/work" "$w/root"
		mount -t overlay overlay -o "lowerdir=$layers,upperdir=$w/upper,workdir=$w/work" "$w/root"
		r="$w/root"
		mkdir -p "$r/dev" "$r/proc" "$r/tmp" "$r/run"
		mount -t tmpfs tmpfs "$r/dev"
		touch "$r/dev/null" && mount --bind /dev/null "$r/dev/null"
		ln -s /proc/self/fd/0 "$r/dev/stdin"
		ln -s /proc/self/fd/1 "$r/dev/stdout"
		ln -s /proc/self/fd/2 "$r/dev/stderr"
		mount -t proc proc "$r/proc"
		mount -t tmpfs tmpfs "$r/run"
		exec chroot ${IN_ROOTFS_USER:+--userspec="$IN_ROOTFS_USER"} "$r" "$@"' _ "$layers" "$w" "$@" || rc=$?
	rmdir "$w"
	return "$rc"
}

# in_rootfs LAYERS CMD...: in_rootfs_exec with CMD run by the rootfs's /bin/sh -c.
in_rootfs() {
	local layers="$1"; shift
	in_rootfs_exec "$layers" /bin/sh -c "$@"
}
