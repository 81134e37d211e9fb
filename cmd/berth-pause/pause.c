/*
 * The C half of berth-pause (see main.go and package sandbox/pause, the
 * same program in Go). It runs as a constructor, before the Go runtime
 * starts, and never returns: it holds the pod's namespaces (berth's
 * monitor starts it with clone flags for new IPC, UTS and PID namespaces,
 * from a thread inside the pod's network namespace), sets the pod's
 * hostname and namespaced sysctls from inside them, seals itself (see
 * seal), reports "ok" (or the error) on fd 3, then sleeps: it reaps
 * orphans while it is PID 1 of the pod's PID namespace, and exits 0 on
 * SIGTERM or SIGINT.
 *
 *   berth-pause [-h HOSTNAME] [-s PATH=VALUE]...
 *
 * PATH is a sysctl's file under /proc/sys (net/ipv4/ip_forward), as
 * pause.SysctlPath maps the name. Only when BERTH_PAUSE_SPEC is set (the
 * older way to pass the spec) does it return and leave the work to Go.
 *
 * Why C: the Go runtime costs a pod ~0.6 MB more (private heap arenas,
 * stacks, threads) and ~1 ms of CPU to start, beside the CNI plugins on
 * the critical path of RunPodSandbox.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#define SYNC_FD 3

/* The ids pause runs as once sealed, as Kubernetes' pause image does. */
#define PAUSE_ID 65535

/* fail reports "WHAT ARG: strerror(errno)" to berth and returns 1. */
static int fail(const char *what, const char *arg)
{
	char msg[512];
	int n = snprintf(msg, sizeof msg, "%s %s: %s", what, arg, strerror(errno));
	if (n > 0)
		(void)!write(SYNC_FD, msg, (size_t)n < sizeof msg ? (size_t)n : sizeof msg - 1);
	return 1;
}

/* dotdot reports whether the path (len bytes) has a ".." component. */
static int dotdot(const char *p, size_t len)
{
	for (size_t i = 0; i + 2 <= len; i++)
		if ((i == 0 || p[i - 1] == '/') && p[i] == '.' && p[i + 1] == '.' && (i + 2 == len || p[i + 2] == '/'))
			return 1;
	return 0;
}

static int write_sysctl(const char *arg)
{
	char path[4096];
	const char *eq = strchr(arg, '=');
	if (eq == NULL || eq == arg || arg[0] == '/' || dotdot(arg, (size_t)(eq - arg))) {
		errno = EINVAL;
		return fail("sysctl (want PATH=VALUE under /proc/sys)", arg);
	}
	int n = snprintf(path, sizeof path, "/proc/sys/%.*s", (int)(eq - arg), arg);
	if (n < 0 || (size_t)n >= sizeof path) {
		errno = ENAMETOOLONG;
		return fail("sysctl", arg);
	}
	int fd = open(path, O_WRONLY | O_TRUNC | O_CLOEXEC);
	if (fd < 0)
		return fail("sysctl", arg);
	size_t len = strlen(eq + 1);
	ssize_t w = write(fd, eq + 1, len);
	if (w < 0 || (size_t)w != len) {
		if (w >= 0)
			errno = EIO;
		close(fd);
		return fail("sysctl", arg);
	}
	if (close(fd) < 0)
		return fail("sysctl", arg);
	return 0;
}

/*
 * seal shuts pause in, once its hostname and sysctls are set. Pause is PID
 * 1 of the pod's PID namespace, and a container sharing that namespace
 * with CAP_SYS_PTRACE may open /proc/1/root, /proc/1/cwd and /proc/1/fd/N,
 * and ptrace pause: all that must reach nothing the container does not
 * already have. So pause gets a mount namespace of its own whose only
 * mount is an empty, read-only tmpfs (its root and working dir), closes
 * every descriptor but stdio and the sync pipe, and drops every
 * capability, in every set, for good (no new privileges, uid and gid
 * 65535, not dumpable).
 */
static int seal(void)
{
	/*
	 * Anything berth's launcher leaked (a user-namespace launch passes
	 * the program as an open file) would be the host's, readable through
	 * /proc/1/fd.
	 */
	if (syscall(SYS_close_range, SYNC_FD + 1, ~0U, 0) < 0)
		for (int fd = SYNC_FD + 1; fd < 1024; fd++)
			close(fd);
	/*
	 * A copy of the host's mounts, private before anything else: no
	 * mount or unmount of pause's may propagate to the host, and none of
	 * the host's (other pods' rootfs) into pause's namespace, pinned
	 * there.
	 */
	if (unshare(CLONE_NEWNS) < 0)
		return fail("unshare", "the mount namespace");
	if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
		return fail("make mounts private", "/");
	/*
	 * The new root: empty and read-only from the start. It is mounted on
	 * /proc, a directory certain to exist (the sysctls were written
	 * there), and entered; pivot_root(".", ".") then stacks the old root
	 * on it, with no directory needed for it in the new one, and the
	 * detach drops the host's whole tree from the namespace. A chroot
	 * would not do: the old root still mounted, /proc/1/root/.. from a
	 * container would climb out of the tmpfs into the host's /.
	 */
	if (mount("berth-pause", "/proc", "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, "mode=0555,size=4k") < 0)
		return fail("mount tmpfs on", "/proc");
	if (chdir("/proc") < 0)
		return fail("chdir", "/proc");
	if (syscall(SYS_pivot_root, ".", ".") < 0)
		return fail("pivot_root", "into an empty tmpfs");
	if (umount2(".", MNT_DETACH) < 0)
		return fail("detach", "the host's root");
	if (chdir("/") < 0)
		return fail("chdir", "/");

	/*
	 * Capabilities: the bounding set needs CAP_SETPCAP to shrink, so it
	 * goes first; no new privileges, should pause ever exec; then the
	 * ids, whose change from 0 empties the permitted, effective and
	 * ambient sets; capset empties what is left (inheritable), and all
	 * of them where the ids could not change.
	 */
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
		return fail("set", "no_new_privs");
	for (int cap = 0; cap < 64; cap++)
		if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) < 0) {
			if (errno == EINVAL) /* past the kernel's last capability */
				break;
			return fail("drop", "the bounding set");
		}
	if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0 && errno != EINVAL)
		return fail("clear", "the ambient set");
	/*
	 * 65535 is not mapped in a user namespace of fewer than 65536 ids
	 * (EINVAL): pause then stays its root, with no capabilities, which
	 * no container process lacks.
	 */
	/* EPERM: a user namespace whose setgroups is denied, where no
	 * process can change its groups. */
	if (setgroups(0, NULL) < 0 && errno != EPERM)
		return fail("setgroups", "none");
	if (setresgid(PAUSE_ID, PAUSE_ID, PAUSE_ID) < 0 && errno != EINVAL)
		return fail("setresgid", "65535");
	if (setresuid(PAUSE_ID, PAUSE_ID, PAUSE_ID) < 0 && errno != EINVAL)
		return fail("setresuid", "65535");
	struct __user_cap_header_struct hdr = {.version = _LINUX_CAPABILITY_VERSION_3, .pid = 0};
	struct __user_cap_data_struct none[_LINUX_CAPABILITY_U32S_3];
	memset(none, 0, sizeof none);
	if (syscall(SYS_capset, &hdr, none) < 0)
		return fail("clear", "capabilities");
	/*
	 * The uid change made it so already (unless the host's suid_dumpable
	 * says otherwise): only CAP_SYS_PTRACE, not a container process that
	 * runs as 65535 too, may then open /proc/1/mem or ptrace pause.
	 */
	if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0)
		return fail("set", "not dumpable");
	return 0;
}

static int pause_main(int argc, char **argv)
{
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGCHLD);
	/*
	 * Blocked before reporting ready, so a SIGTERM sent the moment berth
	 * sees "ok" waits for sigwaitinfo. A blocked signal is queued even for
	 * the init of a PID namespace, which would otherwise ignore a signal
	 * it has no handler for.
	 */
	if (sigprocmask(SIG_BLOCK, &set, NULL) < 0)
		return fail("block", "signals");

	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "-h") == 0 && i + 1 < argc) {
			const char *name = argv[++i];
			if (sethostname(name, strlen(name)) < 0)
				return fail("set hostname", name);
		} else if (strcmp(argv[i], "-s") == 0 && i + 1 < argc) {
			if (write_sysctl(argv[++i]) != 0)
				return 1;
		} else {
			errno = EINVAL;
			return fail("unknown argument", argv[i]);
		}
	}
	if (seal() != 0)
		return 1;
	(void)!write(SYNC_FD, "ok", 2);
	close(SYNC_FD);

	int reaper = getpid() == 1;
	for (;;) {
		siginfo_t info;
		int sig = sigwaitinfo(&set, &info);
		if (sig < 0)
			continue; /* EINTR */
		if (sig != SIGCHLD)
			return 0;
		if (reaper)
			while (waitpid(-1, NULL, WNOHANG) > 0)
				;
	}
}

__attribute__((constructor)) static void berth_pause(int argc, char **argv, char **envp)
{
	(void)envp;
	if (getenv("BERTH_PAUSE_SPEC") != NULL)
		return;
	_exit(pause_main(argc, argv));
}
