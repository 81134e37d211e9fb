/*
 * berth-podproc: the pod's own process (docs/podproc.md). One runs per pod
 * for the pod's whole life, outliving berth: it is the child subreaper and
 * parent of the pod's processes, copies their output into CRI log files,
 * records each exit to disk the moment it happens (exit.json, written
 * atomically), and answers berth's calls on a unix socket in the framed
 * protocol of proto.h. Single-threaded: one epoll loop over the listening
 * socket, a signalfd for SIGCHLD, the output pipes and the connections.
 *
 *   berth-podproc --socket PATH [--pod ID] [--ready-fd FD]
 *
 * --ready-fd gets "ok" (or the error) once the socket is served, then EOF.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "logw.h"
#include "proto.h"

#define READ_BUF 8192
#define DRAIN_MS 2000 /* how long an exit waits for its output to reach EOF */
#define MAX_CONNS 128

enum { EV_LISTEN = 1, EV_SIGNAL, EV_CONN, EV_PIPE };

struct ev {
	int kind;
};

struct proc;

struct pipe_ev {
	int kind; /* EV_PIPE */
	int fd;   /* -1 once at EOF */
	int stream;
	struct proc *p;
};

struct conn {
	int kind; /* EV_CONN */
	int fd;
	int json;        /* a JSON line from a berth of protocol version 1 */
	uint8_t type;    /* the request's: its response's is this with PP_RESPONSE */
	uint8_t *buf;    /* header, then the payload */
	size_t have;
	uint32_t len;
	struct proc *waits; /* a WAIT pending on it */
	struct conn *next;  /* among waits's waiters */
};

struct proc {
	struct proc *next;
	char *id, *dir, *cgroup;
	struct logw log;
	pid_t pid;
	int state, reaped, status;
	struct timespec finished;
	long long drain; /* monotonic ms by which the exit is recorded; 0 none */
	struct pipe_ev out[2];
	int stdin_fd;
	int32_t exit;
	uint32_t sig, oom;
	struct conn *waiters;
};

static struct ev listen_ev = {EV_LISTEN}, signal_ev = {EV_SIGNAL};
static int epfd, lfd, sfd, nconns, quit;
static const char *pod = "", *sock;
static struct proc *procs;
static struct pp_msg msg;
static uint8_t resp[4096];
static char why[512];
static char rbuf[READ_BUF];

static void logmsg(const char *fmt, ...)
{
	char line[600];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(line, sizeof line - 1, fmt, ap);
	va_end(ap);
	if (n < 0)
		return;
	if ((size_t)n > sizeof line - 2)
		n = sizeof line - 2;
	line[n++] = '\n';
	(void)!write(2, line, (size_t)n);
}

static long long now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static struct proc *find(const char *id)
{
	for (struct proc *p = procs; p != NULL; p = p->next)
		if (strcmp(p->id, id) == 0)
			return p;
	return NULL;
}

/*
 * Connections and processes are freed only once the batch of events being
 * handled is done (graveyard): a later event of the batch may still name
 * one that an earlier event ended. An ended one's kind is 0.
 */
static struct conn *dead_conns;
static struct proc *dead_procs;

static int conn_close(struct conn *c)
{
	if (c->waits != NULL) {
		struct conn **pp = &c->waits->waiters;
		while (*pp != c)
			pp = &(*pp)->next;
		*pp = c->next;
		c->waits = NULL;
	}
	epoll_ctl(epfd, EPOLL_CTL_DEL, c->fd, NULL);
	close(c->fd);
	c->kind = 0;
	c->next = dead_conns;
	dead_conns = c;
	nconns--;
	return 0;
}

/* reply sends a whole response and ends the call. A response is small and
 * the client waits for it, so it fits the socket's buffer at once; if not,
 * the client sees the connection end without one. */
static int reply(struct conn *c, struct pp_enc *e)
{
	size_t n = pp_end(e);
	if (n > 0 && send(c->fd, e->buf, n, MSG_NOSIGNAL | MSG_DONTWAIT) != (ssize_t)n)
		logmsg("podproc %s: response lost", pod);
	return conn_close(c);
}

static void begin(struct pp_enc *e, struct conn *c, uint32_t code)
{
	/* What is not a request is answered as no request in particular. */
	uint8_t t = c->type >= 1 && c->type < PP_NOPS ? c->type : 0;
	pp_begin(e, resp, sizeof resp, (uint8_t)(t | PP_RESPONSE));
	pp_put_u32(e, PP_T_CODE, code);
}

static int fail(struct conn *c, uint32_t code, const char *fmt, ...)
{
	struct pp_enc e;
	char text[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(text, sizeof text, fmt, ap);
	va_end(ap);
	begin(&e, c, code);
	pp_put_str(&e, PP_T_MSG, text);
	return reply(c, &e);
}

static int ok(struct conn *c)
{
	struct pp_enc e;
	begin(&e, c, PP_C_OK);
	return reply(c, &e);
}

static void put_state(struct pp_enc *e, struct proc *p)
{
	pp_put_u32(e, PP_T_PID, (uint32_t)p->pid);
	pp_put_u32(e, PP_T_STATE, (uint32_t)p->state);
	if (p->state == PP_S_EXITED) {
		pp_put_u32(e, PP_T_EXIT, (uint32_t)p->exit);
		pp_put_u32(e, PP_T_EXITSIG, p->sig);
		pp_put_u64(e, PP_T_FINISHED, (uint64_t)p->finished.tv_sec * 1000000000u + (uint64_t)p->finished.tv_nsec);
		pp_put_u32(e, PP_T_OOM, p->oom);
	}
}

static int answer_state(struct conn *c, struct proc *p)
{
	struct pp_enc e;
	begin(&e, c, PP_C_OK);
	put_state(&e, p);
	return reply(c, &e);
}

/* oom_killed reads the oom_kill counter of a cgroup's memory.events (v2)
 * or memory.oom_control (v1): the cgroup is the container's own, so any
 * kill counted there was one of its processes. */
static uint32_t oom_killed(const char *dir)
{
	static const char *files[] = {"memory.events", "memory.oom_control"};
	char path[PATH_MAX], buf[1024];
	for (int i = 0; dir != NULL && i < 2; i++) {
		if (snprintf(path, sizeof path, "%s/%s", dir, files[i]) >= (int)sizeof path)
			return 0;
		int fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			continue;
		ssize_t n = read(fd, buf, sizeof buf - 1);
		close(fd);
		if (n <= 0)
			continue;
		buf[n] = 0;
		for (char *l = buf; l != NULL; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL)
			if (strncmp(l, "oom_kill ", 9) == 0)
				return strtoul(l + 9, NULL, 10) > 0;
	}
	return 0;
}

/* write_exit records an exit as exit.json in dir, atomically: written
 * whole under a temporary name, synced, renamed. A reader sees no file or
 * all of it, whenever this process dies. The format is
 * monitor.ReadExit's. */
static int write_exit(struct proc *p)
{
	char tmp[PATH_MAX], dst[PATH_MAX], body[1024], ts[40];
	ts[logw_time(ts, &p->finished)] = 0;
	int n = snprintf(body, sizeof body,
			 "{\"formatVersion\":1,\"code\":%d,\"signal\":%u,\"finishedAt\":\"%s\",\"oomKilled\":%s}\n",
			 (int)p->exit, p->sig, ts, p->oom ? "true" : "false");
	if (snprintf(tmp, sizeof tmp, "%s/.exit-%d", p->dir, (int)p->pid) >= (int)sizeof tmp ||
	    snprintf(dst, sizeof dst, "%s/exit.json", p->dir) >= (int)sizeof dst) {
		errno = ENAMETOOLONG;
		return -1;
	}
	int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0)
		return -1;
	if (write(fd, body, (size_t)n) != n || fsync(fd) < 0) {
		int e = errno ? errno : EIO;
		close(fd);
		unlink(tmp);
		errno = e;
		return -1;
	}
	if (close(fd) < 0 || rename(tmp, dst) < 0) {
		int e = errno;
		unlink(tmp);
		errno = e;
		return -1;
	}
	/* The rename itself, durable where the dir is on a disk. */
	if ((fd = open(p->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) >= 0) {
		fsync(fd);
		close(fd);
	}
	return 0;
}

/* finish records the exit of a reaped process whose output is drained
 * (or has had DRAIN_MS to drain) and answers its waiters. */
static void finish(struct proc *p)
{
	if (WIFSIGNALED(p->status)) {
		p->sig = (uint32_t)WTERMSIG(p->status);
		p->exit = 128 + (int32_t)p->sig;
	} else {
		p->exit = WEXITSTATUS(p->status);
	}
	p->oom = oom_killed(p->cgroup);
	if (write_exit(p) < 0)
		logmsg("podproc %s: record exit of %s in %s: %s", pod, p->id, p->dir, strerror(errno));
	p->state = PP_S_EXITED;
	p->drain = 0;
	if (p->stdin_fd >= 0) {
		close(p->stdin_fd);
		p->stdin_fd = -1;
	}
	while (p->waiters != NULL) {
		struct conn *c = p->waiters;
		answer_state(c, p); /* unlinks c */
	}
	logmsg("podproc %s: %s (pid %d) exited: code %d signal %u oom %u", pod, p->id, (int)p->pid, (int)p->exit, p->sig, p->oom);
}

static int drained(struct proc *p)
{
	return p->out[0].fd < 0 && p->out[1].fd < 0;
}

static void reap(void)
{
	struct signalfd_siginfo si;
	while (read(sfd, &si, sizeof si) == (ssize_t)sizeof si)
		;
	for (;;) {
		int st;
		pid_t pid = waitpid(-1, &st, WNOHANG);
		if (pid <= 0)
			return;
		/* An orphan of a container (a subreaper's lot) is just reaped. */
		for (struct proc *p = procs; p != NULL; p = p->next) {
			if (p->pid != pid || p->reaped)
				continue;
			p->reaped = 1;
			p->status = st;
			clock_gettime(CLOCK_REALTIME, &p->finished);
			if (drained(p))
				finish(p);
			else
				p->drain = now_ms() + DRAIN_MS;
			break;
		}
	}
}

static void pipe_close(struct pipe_ev *pe)
{
	epoll_ctl(epfd, EPOLL_CTL_DEL, pe->fd, NULL);
	close(pe->fd);
	pe->fd = -1;
}

static void pipe_read(struct pipe_ev *pe)
{
	ssize_t n = read(pe->fd, rbuf, sizeof rbuf);
	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	struct proc *p = pe->p;
	if (n > 0) {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		logw_chunk(&p->log, pe->stream, rbuf, (size_t)n, &ts);
		return;
	}
	pipe_close(pe);
	if (p->reaped && p->state != PP_S_EXITED && drained(p))
		finish(p);
}

static int watch(int fd, void *ev, uint32_t events)
{
	struct epoll_event ee = {.events = events, .data.ptr = ev};
	return epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ee);
}

/* proc_end ends a process's record: unlinked from procs already. */
static void proc_end(struct proc *p)
{
	for (int i = 0; i < 2; i++) {
		if (p->out[i].fd >= 0)
			pipe_close(&p->out[i]);
		p->out[i].kind = 0;
	}
	if (p->stdin_fd >= 0)
		close(p->stdin_fd);
	logw_close(&p->log);
	p->next = dead_procs;
	dead_procs = p;
}

/* bury frees what the last batch of events ended. */
static void bury(void)
{
	while (dead_conns != NULL) {
		struct conn *c = dead_conns;
		dead_conns = c->next;
		free(c->buf);
		free(c);
	}
	while (dead_procs != NULL) {
		struct proc *p = dead_procs;
		dead_procs = p->next;
		free(p->id);
		free(p->dir);
		free(p->cgroup);
		free(p);
	}
}

/* child runs in the new process: its stdio, its network namespace, then
 * the program. What fails is reported on errfd as an errno. */
static void child(int fds[3], int errfd, const char *netns)
{
	sigset_t all;
	sigemptyset(&all);
	sigprocmask(SIG_SETMASK, &all, NULL);
	signal(SIGPIPE, SIG_DFL);
	signal(SIGHUP, SIG_DFL);
	signal(SIGINT, SIG_DFL);
	setsid();
	for (int i = 0; i < 3; i++)
		if (dup2(fds[i], i) < 0)
			goto fail;
	if (netns != NULL) {
		int ns = open(netns, O_RDONLY | O_CLOEXEC);
		if (ns < 0 || setns(ns, CLONE_NEWNET) < 0)
			goto fail;
	}
	execve(msg.argv[0], (char *const *)msg.argv, (char *const *)msg.envp);
fail:;
	int e = errno;
	(void)!write(errfd, &e, sizeof e);
	_exit(127);
}

static int run(struct conn *c)
{
	if (quit)
		return fail(c, PP_C_INVALID, "pod %s: shutting down", pod);
	if (find(msg.id) != NULL)
		return fail(c, PP_C_EXISTS, "%s exists", msg.id);
	if (msg.argv[0][0] != '/')
		return fail(c, PP_C_INVALID, "run %s: the program must be an absolute path, not %s", msg.id, msg.argv[0]);
	struct proc *p = calloc(1, sizeof *p);
	int theirs[3] = {-1, -1, -1}, ep[2] = {-1, -1}, fds[2];
	if (p == NULL)
		return fail(c, PP_C_FAILED, "out of memory");
	p->stdin_fd = p->out[0].fd = p->out[1].fd = -1;
	p->id = strdup(msg.id);
	p->dir = strdup(msg.dir);
	p->cgroup = msg.cgroup ? strdup(msg.cgroup) : NULL;
	if (p->id == NULL || p->dir == NULL || (msg.cgroup && p->cgroup == NULL)) {
		errno = ENOMEM;
		goto fail;
	}
	if (logw_open(&p->log, msg.log) < 0) {
		snprintf(why, sizeof why, "%s: open log %s: %s", msg.id, msg.log, strerror(errno));
		goto failwhy;
	}
	if (msg.flags & PP_FL_STDIN) {
		if (pipe2(fds, O_CLOEXEC) < 0)
			goto fail;
		theirs[0] = fds[0];
		p->stdin_fd = fds[1];
	} else if ((theirs[0] = open("/dev/null", O_RDONLY | O_CLOEXEC)) < 0) {
		goto fail;
	}
	for (int i = 0; i < 2; i++) {
		if (pipe2(fds, O_CLOEXEC) < 0)
			goto fail;
		p->out[i] = (struct pipe_ev){EV_PIPE, fds[0], i + 1, p};
		theirs[i + 1] = fds[1];
		fcntl(fds[0], F_SETFL, O_NONBLOCK);
	}
	if (pipe2(ep, O_CLOEXEC) < 0)
		goto fail;
	/* A fresh exit record: one from an earlier run must not read as this one's. */
	char old[PATH_MAX];
	if (snprintf(old, sizeof old, "%s/exit.json", msg.dir) < (int)sizeof old)
		unlink(old);
	unsigned long ns = (msg.flags & PP_FL_NEWIPC ? CLONE_NEWIPC : 0) | (msg.flags & PP_FL_NEWUTS ? CLONE_NEWUTS : 0) |
			   (msg.flags & PP_FL_NEWPID ? CLONE_NEWPID : 0);
	pid_t pid = (pid_t)syscall(SYS_clone, SIGCHLD | ns, 0, 0, 0, 0);
	if (pid < 0)
		goto fail;
	if (pid == 0)
		child(theirs, ep[1], msg.netns);
	close(ep[1]);
	ep[1] = -1;
	int e = 0;
	ssize_t n;
	do
		n = read(ep[0], &e, sizeof e);
	while (n < 0 && errno == EINTR);
	if (n == (ssize_t)sizeof e) {
		/* It never ran: reaped here, not recorded. */
		waitpid(pid, NULL, 0);
		snprintf(why, sizeof why, "run %s: %s: %s", msg.id, msg.argv[0], strerror(e));
		goto failwhy;
	}
	close(ep[0]);
	for (int i = 0; i < 3; i++)
		close(theirs[i]);
	p->pid = pid;
	p->state = PP_S_RUNNING;
	for (int i = 0; i < 2; i++)
		if (watch(p->out[i].fd, &p->out[i], EPOLLIN) < 0)
			pipe_close(&p->out[i]); /* its output is lost; its exit is not */
	p->next = procs;
	procs = p;
	logmsg("podproc %s: %s runs %s (pid %d)", pod, p->id, msg.argv[0], (int)pid);
	struct pp_enc enc;
	begin(&enc, c, PP_C_OK);
	pp_put_u32(&enc, PP_T_PID, (uint32_t)pid);
	return reply(c, &enc);
fail:
	snprintf(why, sizeof why, "run %s: %s", msg.id, strerror(errno));
failwhy:
	for (int i = 0; i < 3; i++)
		if (theirs[i] >= 0)
			close(theirs[i]);
	for (int i = 0; i < 2; i++)
		if (ep[i] >= 0)
			close(ep[i]);
	proc_end(p);
	return fail(c, PP_C_FAILED, "%s", why);
}

static int dispatch(struct conn *c)
{
	struct proc *p = NULL;
	struct pp_enc e;
	if (msg.id != NULL && msg.type != PP_RUN && msg.type != PP_CREATE && (p = find(msg.id)) == NULL)
		return fail(c, PP_C_NOT_FOUND, "%s: no such container", msg.id);
	switch (msg.type) {
	case PP_PING:
		begin(&e, c, PP_C_OK);
		pp_put_u32(&e, PP_T_PID, (uint32_t)getpid());
		pp_put_u32(&e, PP_T_VMIN, PP_MIN_VERSION);
		pp_put_u32(&e, PP_T_VMAX, PP_VERSION);
		return reply(c, &e);
	case PP_RUN:
		return run(c);
	case PP_SIGNAL:
		/* Unreaped, the pid is still this process's: never another's. */
		if (p->reaped)
			return fail(c, PP_C_NOT_RUNNING, "%s: not running", p->id);
		if (kill(p->pid, (int)msg.signal) < 0)
			return fail(c, PP_C_FAILED, "%s: signal %u: %s", p->id, msg.signal, strerror(errno));
		return ok(c);
	case PP_WAIT:
		if (p->state == PP_S_EXITED)
			return answer_state(c, p);
		/* Answered by finish; the caller hanging up ends it sooner. */
		c->waits = p;
		c->next = p->waiters;
		p->waiters = c;
		free(c->buf);
		c->buf = NULL;
		return 0;
	case PP_STATUS:
		return answer_state(c, p);
	case PP_REOPEN:
		if (logw_reopen(&p->log) < 0)
			return fail(c, PP_C_FAILED, "%s: reopen log %s: %s", p->id, p->log.path, strerror(errno));
		return ok(c);
	case PP_DELETE: {
		if (p->state != PP_S_EXITED)
			return fail(c, PP_C_BUSY, "%s: still running", p->id);
		struct proc **pp = &procs;
		while (*pp != p)
			pp = &(*pp)->next;
		*pp = p->next;
		proc_end(p);
		return ok(c);
	}
	case PP_SHUTDOWN: {
		int running = 0;
		for (p = procs; p != NULL; p = p->next)
			running += p->state != PP_S_EXITED;
		if (running > 0)
			return fail(c, PP_C_BUSY, "pod %s still has %d running processes", pod, running);
		quit = 1;
		return ok(c);
	}
	case PP_CREATE:
	case PP_START:
	case PP_EXEC:
	case PP_ATTACH:
	case PP_UPDATE:
		return fail(c, PP_C_UNSUPPORTED, "operation %u is not in this build of the pod process", msg.type);
	}
	return fail(c, PP_C_INVALID, "message type %u is not a request", msg.type);
}

/* json_refusal answers a JSON line from a berth that speaks only protocol
 * version 1 with that version's own refusal, which it reports as such. */
static int json_refusal(struct conn *c)
{
	char line[256];
	int n = snprintf(line, sizeof line,
			 "{\"version\":%d,\"code\":\"version\",\"error\":\"pod %s: its process speaks protocol versions %d to %d\"}\n",
			 PP_VERSION, pod, PP_MIN_VERSION, PP_VERSION);
	(void)!send(c->fd, line, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT);
	return conn_close(c);
}

static int conn_read(struct conn *c)
{
	if (c->waits != NULL) /* nothing more is expected: data or a hangup ends the wait */
		return conn_close(c);
	if (c->json) {
		ssize_t n = read(c->fd, rbuf, sizeof rbuf);
		if (n > 0 && memchr(rbuf, '\n', (size_t)n) != NULL)
			return json_refusal(c);
		if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR))
			return conn_close(c);
		return 0;
	}
	size_t want = c->have < PP_HDR ? PP_HDR : PP_HDR + (size_t)c->len;
	ssize_t n = read(c->fd, c->buf + c->have, want - c->have);
	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return 0;
	if (n <= 0)
		return conn_close(c);
	if (c->have == 0 && c->buf[0] == '{') {
		/* The whole line read is dropped: the answer is the same. */
		if (memchr(c->buf, '\n', (size_t)n) != NULL)
			return json_refusal(c);
		c->json = 1;
		return 0;
	}
	c->have += (size_t)n;
	if (c->have < want)
		return 0;
	if (c->have == PP_HDR) {
		int r = pp_header(c->buf, c->have, &c->len);
		uint8_t *nb;
		if ((r != PP_OK && r != PP_E_VERSION) || (nb = realloc(c->buf, PP_HDR + (size_t)c->len)) == NULL)
			return conn_close(c); /* not a frame of any version */
		c->buf = nb;
		if (c->len > 0)
			return 0;
	}
	const char *reason;
	int r = pp_parse(c->buf, c->have, &msg, &reason);
	c->type = c->buf[2];
	if (r == PP_E_VERSION)
		return fail(c, PP_C_VERSION, "pod %s: its process speaks protocol versions %d to %d, not %u", pod, PP_MIN_VERSION,
			    PP_VERSION, c->buf[1]);
	if (r != PP_OK)
		return fail(c, PP_C_INVALID, "invalid request: %s", reason);
	return dispatch(c);
}

static void accept_all(void)
{
	for (;;) {
		int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0)
			return;
		struct ucred cred;
		socklen_t cl = sizeof cred;
		struct conn *c = NULL;
		/* Only root or this process's own user may call. */
		if (nconns >= MAX_CONNS || getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &cl) < 0 ||
		    (cred.uid != 0 && cred.uid != geteuid()) || (c = calloc(1, sizeof *c)) == NULL ||
		    (c->buf = malloc(PP_HDR)) == NULL) {
			if (c != NULL)
				free(c);
			close(fd);
			continue;
		}
		c->kind = EV_CONN;
		c->fd = fd;
		if (watch(fd, c, EPOLLIN | EPOLLRDHUP) < 0) {
			free(c->buf);
			free(c);
			close(fd);
			continue;
		}
		nconns++;
	}
}

static int setup(const char *path)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	if (strlen(path) >= sizeof sa.sun_path) {
		errno = ENAMETOOLONG;
		return -1;
	}
	strcpy(sa.sun_path, path);
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, SIGCHLD);
	/* Berth's terminal, berth's death and a reader hanging up on a pipe
	 * must not end the pod's process. */
	signal(SIGPIPE, SIG_IGN);
	signal(SIGHUP, SIG_IGN);
	signal(SIGINT, SIG_IGN);
	if (prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) < 0 || sigprocmask(SIG_BLOCK, &set, NULL) < 0 ||
	    (sfd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC)) < 0 || (epfd = epoll_create1(EPOLL_CLOEXEC)) < 0 ||
	    (lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0)) < 0)
		return -1;
	/* Its memory and descriptors are nobody's to read, a container's
	 * CAP_SYS_PTRACE in a shared PID namespace included. */
	prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
	unlink(path);
	mode_t old = umask(0177);
	int r = bind(lfd, (struct sockaddr *)&sa, sizeof sa);
	umask(old);
	if (r < 0 || listen(lfd, 64) < 0 || watch(lfd, &listen_ev, EPOLLIN) < 0 || watch(sfd, &signal_ev, EPOLLIN) < 0)
		return -1;
	return 0;
}

int main(int argc, char **argv)
{
	int ready = -1;
	for (int i = 1; i + 1 < argc; i += 2) {
		if (strcmp(argv[i], "--socket") == 0)
			sock = argv[i + 1];
		else if (strcmp(argv[i], "--pod") == 0)
			pod = argv[i + 1];
		else if (strcmp(argv[i], "--ready-fd") == 0)
			ready = atoi(argv[i + 1]);
	}
	/* Nothing inherited but stdio and the ready fd stays open: what this
	 * process holds is no container's to see. */
	if ((ready == 3 || close_range(3, ready < 3 ? ~0u : (unsigned)ready - 1, 0) == 0) &&
	    (ready < 3 || close_range((unsigned)ready + 1, ~0u, 0) == 0)) {
	} else { /* a kernel before 5.9 */
		for (long fd = 3, max = sysconf(_SC_OPEN_MAX); fd < max; fd++)
			if (fd != ready)
				close((int)fd);
	}
	if (sock == NULL || argc % 2 == 0) {
		static const char usage[] = "usage: berth-podproc --socket PATH [--pod ID] [--ready-fd FD]";
		if (ready >= 0)
			(void)!write(ready, usage, sizeof usage - 1);
		logmsg("%s", usage);
		return 2;
	}
	if (setup(sock) < 0) {
		int n = snprintf(why, sizeof why, "berth-podproc: serve %s: %s", sock, strerror(errno));
		if (ready >= 0)
			(void)!write(ready, why, (size_t)n);
		logmsg("%s", why);
		return 1;
	}
	if (ready >= 0) {
		(void)!write(ready, "ok", 2);
		close(ready);
	}
	logmsg("podproc %s: serving %s (pid %d)", pod, sock, (int)getpid());
	while (!quit) {
		long long next = -1, now = now_ms();
		for (struct proc *p = procs; p != NULL; p = p->next)
			if (p->drain > 0 && (next < 0 || p->drain < next))
				next = p->drain;
		struct epoll_event evs[16];
		int n = epoll_wait(epfd, evs, 16, next < 0 ? -1 : next <= now ? 0 : (int)(next - now));
		for (int i = 0; i < n; i++) {
			struct ev *ev = evs[i].data.ptr;
			switch (ev->kind) { /* 0: ended earlier in this batch */
			case EV_LISTEN: accept_all(); break;
			case EV_SIGNAL: reap(); break;
			case EV_PIPE: pipe_read((struct pipe_ev *)ev); break;
			case EV_CONN: conn_read((struct conn *)ev); break;
			}
		}
		bury();
		now = now_ms();
		for (struct proc *p = procs; p != NULL; p = p->next)
			if (p->drain > 0 && p->drain <= now)
				finish(p);
	}
	unlink(sock);
	logmsg("podproc %s: done", pod);
	return 0;
}
