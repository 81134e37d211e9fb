# Sourced by hack/build-images and hack/e2e-images (after hack/rootfs.sh): the
# root filesystems of the test images that both build on (prepare_NAME DIR
# [BASE]) and their checks (check_NAME LAYERS). The caller sets $work (a
# scratch directory) and defines log. The files written as they are (users,
# configurations) are in test/images/rootfs/NAME, at their paths in the image.
ROOTFS_FILES="$BERTH_ROOT_DIR/test/images/rootfs"

# The default critest image (registry.k8s.io/e2e-test-images/busybox:1.29-2 and
# friends): Debian's dynamically linked busybox with every applet a hard link in
# /bin (so `sh -c ls` execs /bin/ls through PATH: critest compares the exact
# "/bin/sh: ls: Permission denied" when /bin/ls is masked), plus util-linux ipcs
# and procps pgrep, which Debian's busybox lacks. Users as in the upstream
# busybox image where critest or the images on top need them: root, www-data
# (33, nginx and httpd run their workers as it), user (1000), nobody. BUSYBOX,
# if given, is the busybox binary to use instead of the .deb's (hack/e2e-images:
# upstream's, hack/e2e-busybox).
prepare_busybox() {
	local r="$1" bin="${2:-}" applet
	local x="$work/busybox-deb"
	if [[ -z "$bin" ]]; then
		extract_debs "$x" busybox
		bin="$x/bin/busybox"
	fi
	mkdir -p "$r"/{bin,etc,lib,lib64,root,tmp,home/user,proc,sys,dev,var/tmp,var/www,usr}
	chmod 1777 "$r/tmp" "$r/var/tmp"
	chmod 0700 "$r/root"
	install -m 0755 "$bin" "$r/bin/busybox"
	for applet in $("$r/bin/busybox" --list); do
		[[ "$applet" == busybox || "$applet" == linuxrc ]] && continue
		ln "$r/bin/busybox" "$r/bin/$applet"
	done
	ln -s bin "$r/sbin"
	ln -s ../bin "$r/usr/bin"
	ln -s ../bin "$r/usr/sbin"
	rm -f "$r/bin/ipcs" "$r/bin/pgrep"
	install -m 0755 /usr/bin/ipcs /usr/bin/pgrep "$r/bin/"
	copy_libs "$r" "" "" "$bin" /usr/bin/ipcs /usr/bin/pgrep
	install -m 0644 "$ROOTFS_FILES"/busybox/etc/{passwd,group} "$r/etc/"
	chown 1000:1000 "$r/home/user"
}

# nginx, on busybox (registry.k8s.io/e2e-test-images/nginx:1.14-2 and
# gcr.io/k8s-staging-cri-tools/hostnet-nginx-amd64): Debian's nginx binary, the
# directories its compiled-in paths need, and a configuration laid out like the
# upstream image's: /etc/nginx/nginx.conf (master as root, workers as
# www-data, pid file /var/run/nginx.pid, logs to stdout/stderr) including
# /etc/nginx/conf.d/*.conf, where default.conf serves /usr/share/nginx/html on
# :80 (the hostnet image replaces it with one on :12003, test/images/mkimage/images.go).
prepare_nginx() {
	local r="$1" base="$2" d
	local x="$work/nginx-deb"
	extract_debs "$x" nginx
	mkdir -p "$r"/usr/local/sbin "$r"/etc/nginx/conf.d "$r"/var/run "$r"/var/log/nginx "$r"/usr/share/nginx/html
	install -m 0755 "$x/usr/sbin/nginx" "$r/usr/local/sbin/nginx"
	for d in body fastcgi proxy scgi uwsgi; do mkdir -p "$r/var/lib/nginx/$d"; done
	ln -s /dev/stdout "$r/var/log/nginx/access.log"
	ln -s /dev/stderr "$r/var/log/nginx/error.log"
	echo '<html><body>berth test nginx</body></html>' >"$r/usr/share/nginx/html/index.html"
	install -m 0644 "$ROOTFS_FILES/nginx/etc/nginx/nginx.conf" "$r/etc/nginx/"
	install -m 0644 "$ROOTFS_FILES/nginx/etc/nginx/conf.d/default.conf" "$r/etc/nginx/conf.d/"
	copy_libs "$r" "$base" "$x" "$x/usr/sbin/nginx"
}

# httpd, on busybox (registry.k8s.io/e2e-test-images/httpd:2.4.39-4): Debian's
# Apache 2.4 laid out like the upstream httpd image, /usr/local/apache2 with
# bin/httpd (argv[0] "httpd", so its start-up messages name httpd, as critest's
# log check wants), the few modules its configuration loads, htdocs, and a
# logs directory for the pid file, and bin/httpd-foreground, the command, with
# a configuration of its own (test/images/rootfs/httpd).
prepare_httpd() {
	local r="$1" base="$2" m
	local x="$work/httpd-deb"
	local mods=(mod_mpm_event mod_authz_core mod_dir)
	extract_debs "$x" apache2-bin libapr1 libaprutil1
	local a="$r/usr/local/apache2"
	mkdir -p "$a"/{bin,conf,htdocs,logs,modules}
	install -m 0755 "$x/usr/sbin/apache2" "$a/bin/httpd"
	for m in "${mods[@]}"; do
		install -m 0644 "$x/usr/lib/apache2/modules/$m.so" "$a/modules/$m.so"
	done
	echo '<html><body>berth test httpd</body></html>' >"$a/htdocs/index.html"
	# The image's command, as upstream's: Debian's binary looks for
	# /etc/apache2/apache2.conf unless told otherwise.
	install -m 0755 "$ROOTFS_FILES/httpd/usr/local/apache2/bin/httpd-foreground" "$a/bin/"
	install -m 0644 "$ROOTFS_FILES/httpd/usr/local/apache2/conf/httpd.conf" "$a/conf/"
	# glibc dlopens libgcc_s for pthread_exit, which Apache's threads call: ldd
	# does not list it.
	mkdir -p "$r/lib/x86_64-linux-gnu"
	install -m 0755 /lib/x86_64-linux-gnu/libgcc_s.so.1 "$r/lib/x86_64-linux-gnu/"
	local bins=("$a/bin/httpd")
	for m in "${mods[@]}"; do bins+=("$a/modules/$m.so"); done
	copy_libs "$r" "$base" "$x" "${bins[@]}"
}

# pause (registry.k8s.io/pause:3.9, k8s.gcr.io/pause:3.9): only /pause, static.
prepare_pause() {
	local r="$1"
	mkdir -p "$r"
	go_static "$r/pause" ./test/images/pause
}

# nonewprivs, on busybox (registry.k8s.io/e2e-test-images/nonewprivs:1.3):
# /usr/local/bin/nnp, static, setuid root; it prints its effective uid.
prepare_nonewprivs() {
	local r="$1"
	mkdir -p "$r/usr/local/bin"
	go_static "$r/usr/local/bin/nnp" ./test/images/nonewprivs
	chown 0:0 "$r/usr/local/bin/nnp"
	chmod 04755 "$r/usr/local/bin/nnp"
}

# check_busybox ROOTFS: every tool critest runs in the default image must run.
check_busybox() {
	local r="$1" out
	out="$(in_rootfs "$r" '
		set -e
		for t in sh echo cat ls touch grep mkdir seq sync dd chmod sleep top id pidof pgrep mount hostname brctl netstat ping ipcs wget; do
			[ -f "/bin/$t" ] || { echo "missing /bin/$t"; exit 1; }
		done
		ls / >/dev/null
		[ "$(id -u nobody)" = 65534 ] && [ "$(id -u user)" = 1000 ] && [ "$(id -u www-data)" = 33 ] && [ "$(id -un)" = root ]
		pgrep --version >/dev/null
		ipcs >/dev/null
		[ "$(seq 3 | tr "\n" " ")" = "1 2 3 " ]
		touch /tmp/x && [ -f /tmp/x ]
		pgrep sleep || true
		echo ok
	' 2>&1)" || { log "busybox rootfs check failed: $out"; return 1; }
	[[ "$out" == ok ]] || { log "busybox rootfs check: unexpected output: $out"; return 1; }
	# critest masks /bin/ls with /dev/null and expects this exact message.
	out="$(in_rootfs "$r" 'mount --bind /dev/null /bin/ls && exec /bin/sh -c ls' 2>&1)" && {
		log "busybox rootfs check: masked ls ran"; return 1; }
	[[ "$out" == "/bin/sh: ls: Permission denied" ]] || {
		log "busybox rootfs check: masked ls said '$out', want '/bin/sh: ls: Permission denied'"; return 1; }
}

# check_nginx LAYERS: nginx starts with the image's configuration, serves
# 200 on :80, writes /var/run/nginx.pid, and its master's command line says
# "master process" (critest's ContainerPID spec greps /proc/1/cmdline for it).
check_nginx() {
	local layers="$1" out
	out="$(in_rootfs "$layers" '
		set -e
		nginx -g "daemon off;" >/tmp/nginx.log 2>&1 &
		for i in $(seq 50); do [ -s /var/run/nginx.pid ] && break; sleep 0.1; done
		pid="$(cat /var/run/nginx.pid)"
		tr "\0" " " </proc/$pid/cmdline | grep -q "master process" || { echo "nginx cmdline: $(tr "\0" " " </proc/$pid/cmdline)"; exit 1; }
		for i in $(seq 50); do wget -q -O /tmp/page http://127.0.0.1/ 2>/dev/null && break; sleep 0.1; done
		grep -q "berth test nginx" /tmp/page
		[ "$(pidof nginx | wc -w)" -ge 2 ] || { echo "nginx processes: $(pidof nginx)"; exit 1; }
		kill "$pid"
		echo ok
	' 2>&1)" || { log "nginx check failed: $out"; return 1; }
	[[ "$out" == ok ]] || { log "nginx check: unexpected output: $out"; return 1; }
}

# check_httpd LAYERS: httpd starts in the foreground, serves 200 on :80, and
# its log names httpd.
check_httpd() {
	local layers="$1" out
	out="$(in_rootfs "$layers" '
		set -e
		export PATH=/usr/local/apache2/bin:$PATH
		httpd-foreground >/tmp/httpd.log 2>&1 &
		for i in $(seq 50); do wget -q -O /tmp/page http://127.0.0.1/ 2>/dev/null && break; sleep 0.1; done
		grep -q "berth test httpd" /tmp/page || { echo "no page; log:"; cat /tmp/httpd.log; exit 1; }
		grep -q httpd /tmp/httpd.log || { echo "log does not name httpd:"; cat /tmp/httpd.log; exit 1; }
		if grep -q "exit signal\|must be installed" /tmp/httpd.log; then echo "httpd workers crashed:"; cat /tmp/httpd.log; exit 1; fi
		kill "$(cat /usr/local/apache2/logs/httpd.pid)"
		echo ok
	' 2>&1)" || { log "httpd check failed: $out"; return 1; }
	[[ "$out" == ok ]] || { log "httpd check: unexpected output: $out"; return 1; }
}

# check_nonewprivs LAYERS: nnp is setuid root: run as uid 1000 it prints 0.
check_nonewprivs() {
	local layers="$1" out
	out="$(IN_ROOTFS_USER=1000:1000 in_rootfs "$layers" 'exec /usr/local/bin/nnp' 2>&1)" || true
	[[ "$out" == "Effective uid: 0" ]] || { log "nonewprivs check: nnp as uid 1000 said '$out', want 'Effective uid: 0'"; return 1; }
}

# check_pause DIR: /pause runs, and exits 0 on SIGTERM.
check_pause() {
	local r="$1" pid rc=0
	"$r/pause" 2>/dev/null &
	pid=$!
	sleep 0.2
	kill -TERM "$pid"
	wait "$pid" || rc=$?
	[[ $rc == 0 ]] || { log "pause check: exit status $rc after SIGTERM, want 0"; return 1; }
}
