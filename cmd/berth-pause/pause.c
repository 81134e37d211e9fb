/*
 * The C half of berth-pause (see main.go and package sandbox/pause, the
 * same program in Go). It runs as a constructor, before the Go runtime
 * starts, and never returns: it holds the pod's namespaces (berth's
 * monitor starts it with clone flags for new IPC, UTS and PID namespaces,
 * from a thread inside the pod's network namespace), sets the pod's
 * hostname and namespaced sysctls from inside them, reports "ok" (or the
 * error) on fd 3, then sleeps: it reaps orphans while it is PID 1 of the
 * pod's PID namespace, and exits 0 on SIGTERM or SIGINT.
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
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define SYNC_FD 3

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
