/*
 * berth-podproc: the pod's own process (docs/podproc.md). One runs per pod
 * for the pod's whole life, outliving berth: it is the child subreaper and
 * parent of the pod's processes, copies their output into CRI log files
 * and to attached clients, records each exit to disk the moment it happens
 * (exit.json, written atomically), and answers berth's calls on a unix
 * socket in the framed protocol of proto.h. Containers are created, exec'd
 * and updated by the spawn helper (berth-spawn, Go, libcontainer), one run
 * per call, which this process runs and whose processes it inherits.
 * Single-threaded: one epoll loop over the listening socket, a signalfd
 * for SIGCHLD, the output pipes, the helpers' results and the connections.
 *
 *   berth-podproc --socket PATH [--pod ID] [--ready-fd FD]
 *                 [--spawn BIN --root DIR [--systemd 1]]
 *
 * --ready-fd gets "ok" (or the error) once the socket is served, then EOF.
 * --spawn is the helper, --root libcontainer's state root, --systemd 1 the
 * systemd cgroup driver; without them CREATE, EXEC and UPDATE are refused.
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
#include <grp.h>
#include <sys/epoll.h>
#include <sys/inotify.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <poll.h>
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
#define DRAIN_MS 2000	/* how long an exit waits for its output to reach EOF */
#define SPAWN_MS 120000 /* a helper run that takes longer is killed */
#define MAX_CONNS 128

enum { EV_LISTEN = 1, EV_SIGNAL, EV_CONN, EV_PIPE, EV_FIFO, EV_STDIN, EV_JOB, EV_OOM };
/* Processes: RUN's own children, containers' inits, exec processes. */
enum { K_RUN, K_CTR, K_EXEC };
/* What a connection does once its request is read: M_CALL reads it,
 * M_WAIT waits in p->waiters, M_ATTACH streams in p->attached, M_HELD
 * waits for a helper or a start (*held points to it), M_EXEC waits for
 * its exec process p to end. In all but M_CALL and M_ATTACH, anything
 * read from berth, a hangup included, ends the call. */
enum { M_CALL, M_WAIT, M_ATTACH, M_HELD, M_EXEC };
enum { J_CREATE = 1, J_EXEC, J_UPDATE, J_DESTROY, J_JOIN };
static const char *const ops[] = {"", "create", "exec", "update", "destroy", "join"};

struct ev {
	int kind;
};

struct proc;

struct pipe_ev {
	int kind; /* EV_PIPE, EV_FIFO, EV_STDIN */
	int fd;	  /* -1 once closed */
	int stream;
	struct proc *p;
};

struct conn {
	int kind; /* EV_CONN */
	int fd, json, mode;
	uint8_t type;	 /* the request's: its response's is this with PP_RESPONSE */
	uint8_t *buf;	 /* header, then the payload */
	size_t have;
	uint32_t len, flags; /* flags: ATTACH's */
	struct proc *p;
	struct conn *next; /* among p's waiters or attached */
	struct conn **held;
};

struct job; /* one run of the spawn helper */

struct proc {
	struct proc *next;
	char *id, *dir;		 /* stored after the record */
	char *cgroup;		 /* where the oom_kill counter is */
	char *cgdirs;		 /* a plain destroy's cgroups, each ending in \n */
	struct logw log;
	int kind, state, reaped, status, pidfd, tty, stdin_once, destroying;
	int wd, oomseen;     /* the systemd driver's OOM watch (oom_watch) */
	long long oombase;   /* the parent's oom_kill when the watch began */
	pid_t pid;
	struct timespec finished;
	long long drain; /* monotonic ms by which the exit is recorded; 0 none */
	struct pipe_ev out[2], fifo, in; /* in: our end of its stdin */
	uint8_t *inpend;		 /* input that did not fit its stdin yet */
	size_t inlen;
	int32_t exit;
	uint32_t sig, oom;
	struct conn *waiters, *attached, *starter, *execc;
	struct job *job; /* the destroy of what an exited container left */
};

struct job {
	int kind; /* EV_JOB */
	int fd, ack, console, op, ours[3], nours, eof, pidfd, master, gone, status, plain, restore;
	struct timespec finished; /* gone: its process ended, status, at finished */
	pid_t helper, pid; /* helper: 0 once reaped; pid: the process it made */
	long long deadline;
	struct proc *p;
	struct conn *c;
	char *err;	      /* a destroy after a failed create: the create's answer */
	const char *fault, *memcg; /* the result's */
	size_t n;
	char res[2048], why[256];
	struct job *next;
};

static struct ev listen_ev = {EV_LISTEN}, signal_ev = {EV_SIGNAL}, oom_ev = {EV_OOM};
static int epfd, lfd, sfd, nconns, quit, systemd, ifd = -1;
static const char *pod = "", *sock, *spawn_bin, *root;
static struct proc *procs;
static struct job *jobs;
static struct pp_msg msg;
static uint8_t resp[4096];
static char why[512];
static char rbuf[READ_BUF];
extern char **environ;

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

/* find: a container or RUN's process by id (exec processes have none). */
static struct proc *find(const char *id)
{
	for (struct proc *p = procs; p != NULL; p = p->next)
		if (p->kind != K_EXEC && strcmp(p->id, id) == 0)
			return p;
	return NULL;
}

static void unlink_proc(struct proc *p)
{
	struct proc **pp = &procs;
	while (*pp != p)
		pp = &(*pp)->next;
	*pp = p->next;
}

static int watch(int fd, void *ev, uint32_t events)
{
	struct epoll_event ee = {.events = events, .data.ptr = ev};
	return epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ee);
}

static void pipe_close(struct pipe_ev *pe)
{
	if (pe->fd < 0)
		return;
	epoll_ctl(epfd, EPOLL_CTL_DEL, pe->fd, NULL);
	close(pe->fd);
	pe->fd = -1;
}

/* close_all closes the descriptors of fds that are open, and marks them closed. */
static void close_all(int *fds, int n)
{
	for (int i = 0; i < n; i++)
		if (fds[i] >= 0) {
			close(fds[i]);
			fds[i] = -1;
		}
}

/* proc_kill signals a process not yet reaped: its pid is still ours. */
static int proc_kill(struct proc *p, int sig)
{
	if (p->pidfd >= 0)
		return (int)syscall(SYS_pidfd_send_signal, p->pidfd, sig, NULL, 0);
	return kill(p->pid, sig);
}

/*
 * Connections, processes and jobs are freed only once the batch of events
 * being handled is done (graveyard): a later event of the batch may still
 * name one that an earlier event ended. An ended one's kind is 0.
 */
static struct conn *dead_conns;
static struct proc *dead_procs;
static struct job *dead_jobs;

static void settle(struct proc *p);

/* Input: written to the process's stdin as it takes it. While some waits,
 * the attached clients that send input are not read. */
static void pause_input(struct proc *p, int pause)
{
	for (struct conn *c = p->attached; c != NULL; c = c->next) {
		struct epoll_event ee = {.events = pause ? 0 : EPOLLIN | EPOLLRDHUP, .data.ptr = c};
		if (c->flags & PP_FL_STDIN)
			epoll_ctl(epfd, EPOLL_CTL_MOD, c->fd, &ee);
	}
}

static void input_drop(struct proc *p)
{
	if (p->inpend == NULL)
		return;
	free(p->inpend);
	p->inpend = NULL;
	epoll_ctl(epfd, EPOLL_CTL_DEL, p->in.fd, NULL);
	pause_input(p, 0);
}

static void input(struct proc *p, const uint8_t *d, size_t n)
{
	ssize_t w = p->in.fd < 0 ? (ssize_t)n : write(p->in.fd, d, n);
	if (w < 0) /* the process closed its stdin: dropped */
		w = errno == EAGAIN ? 0 : (ssize_t)n;
	if ((size_t)w == n || (p->inpend = malloc(n - (size_t)w)) == NULL)
		return;
	memcpy(p->inpend, d + w, n - (size_t)w);
	p->inlen = n - (size_t)w;
	if (watch(p->in.fd, &p->in, EPOLLOUT) < 0) {
		free(p->inpend);
		p->inpend = NULL;
		return;
	}
	pause_input(p, 1);
}

static void input_ready(struct proc *p)
{
	ssize_t w = write(p->in.fd, p->inpend, p->inlen);
	if (w < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	if (w > 0 && (size_t)w < p->inlen) {
		memmove(p->inpend, p->inpend + w, p->inlen - (size_t)w);
		p->inlen -= (size_t)w;
		return;
	}
	input_drop(p);
}

static void stdin_close(struct proc *p)
{
	input_drop(p);
	if (p->in.fd >= 0)
		close(p->in.fd);
	p->in.fd = -1;
}

/* stdin_once ends the input of a process made with stdin-once. A
 * terminal cannot be half-closed: it is closed whole, hung up. */
static void stdin_once(struct proc *p)
{
	if (!p->stdin_once)
		return;
	stdin_close(p);
	if (p->tty) {
		pipe_close(&p->out[0]);
		settle(p);
	}
}

static int conn_close(struct conn *c)
{
	struct proc *p = c->p;
	if (c->mode == M_WAIT || c->mode == M_ATTACH) {
		struct conn **pp = c->mode == M_WAIT ? &p->waiters : &p->attached;
		while (*pp != c)
			pp = &(*pp)->next;
		*pp = c->next;
		/* stdin-once: the first attach session with stdin is over. */
		if (c->mode == M_ATTACH && (c->flags & PP_FL_STDIN))
			stdin_once(p);
	}
	if (c->mode == M_EXEC) { /* nobody is left to see its output or exit */
		p->execc = NULL;
		if (!p->reaped)
			proc_kill(p, SIGKILL);
	}
	if (c->held != NULL)
		*c->held = NULL;
	c->mode = M_CALL;
	epoll_ctl(epfd, EPOLL_CTL_DEL, c->fd, NULL);
	close(c->fd);
	c->kind = 0;
	c->next = dead_conns;
	dead_conns = c;
	nconns--;
	return 0;
}

/* send_frame sends a frame whole, with descriptors if any. A client that
 * cannot take it at once is too slow or gone: -1. Responses are small and
 * awaited, so they fit the socket's buffer. */
static int send_frame(int fd, const void *hdr, size_t hn, const void *data, size_t dn, const int *fds, int nfds)
{
	struct iovec iov[2] = {{(void *)hdr, hn}, {(void *)data, dn}};
	union {
		char buf[CMSG_SPACE(3 * sizeof(int))];
		struct cmsghdr align;
	} u;
	struct msghdr mh = {.msg_iov = iov, .msg_iovlen = dn > 0 ? 2 : 1};
	if (nfds > 0) {
		memset(&u, 0, sizeof u);
		mh.msg_control = u.buf;
		mh.msg_controllen = CMSG_SPACE((size_t)nfds * sizeof(int));
		struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
		cm->cmsg_level = SOL_SOCKET;
		cm->cmsg_type = SCM_RIGHTS;
		cm->cmsg_len = CMSG_LEN((size_t)nfds * sizeof(int));
		memcpy(CMSG_DATA(cm), fds, (size_t)nfds * sizeof(int));
	}
	return sendmsg(fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT) == (ssize_t)(hn + dn) ? 0 : -1;
}

static int respond(struct conn *c, struct pp_enc *e, const int *fds, int nfds)
{
	size_t n = pp_end(e);
	if (n == 0 || send_frame(c->fd, e->buf, n, NULL, 0, fds, nfds) < 0) {
		logmsg("podproc %s: response lost", pod);
		return -1;
	}
	return 0;
}

/* reply sends a response and ends the call. */
static int reply(struct conn *c, struct pp_enc *e)
{
	respond(c, e, NULL, 0);
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

static void put_exit(struct pp_enc *e, struct proc *p)
{
	pp_put_u32(e, PP_T_EXIT, (uint32_t)p->exit);
	pp_put_u32(e, PP_T_EXITSIG, p->sig);
	pp_put_u64(e, PP_T_FINISHED, (uint64_t)p->finished.tv_sec * 1000000000u + (uint64_t)p->finished.tv_nsec);
	pp_put_u32(e, PP_T_OOM, p->oom);
}

static int answer_state(struct conn *c, struct proc *p)
{
	struct pp_enc e;
	begin(&e, c, PP_C_OK);
	pp_put_u32(&e, PP_T_PID, (uint32_t)p->pid);
	pp_put_u32(&e, PP_T_STATE, (uint32_t)p->state);
	if (p->state == PP_S_EXITED)
		put_exit(&e, p);
	return reply(c, &e);
}

/* answer_pid answers a call that made a process, with descriptors if any. */
static int answer_pid(struct conn *c, pid_t pid, const int *fds, int nfds)
{
	struct pp_enc e;
	begin(&e, c, PP_C_OK);
	pp_put_u32(&e, PP_T_PID, (uint32_t)pid);
	return respond(c, &e, fds, nfds);
}

/* send_exit ends a stream (an attach, an exec's) with the exit. */
static void send_exit(struct conn *c, struct proc *p)
{
	struct pp_enc e;
	pp_begin(&e, resp, sizeof resp, PP_F_EXIT);
	put_exit(&e, p);
	size_t n = pp_end(&e);
	if (n > 0)
		send_frame(c->fd, e.buf, n, NULL, 0, NULL, 0);
	conn_close(c);
}

/* oom_count reads the oom_kill counter of a cgroup's memory.events (v2)
 * or memory.oom_control (v1); -1: neither. */
static long long oom_count(const char *dir)
{
	static const char *files[] = {"memory.events", "memory.oom_control"};
	char path[PATH_MAX], buf[1024];
	for (int i = 0; dir != NULL && i < 2; i++) {
		if (snprintf(path, sizeof path, "%s/%s", dir, files[i]) >= (int)sizeof path)
			continue;
		int fd = open(path, O_RDONLY | O_CLOEXEC);
		ssize_t n = fd < 0 ? -1 : read(fd, buf, sizeof buf - 1);
		if (fd >= 0)
			close(fd);
		if (n <= 0)
			continue;
		buf[n] = 0;
		for (char *l = buf; l != NULL; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL)
			if (strncmp(l, "oom_kill ", 9) == 0)
				return strtoll(l + 9, NULL, 10);
	}
	return -1;
}

/*
 * The systemd driver's OOM watch, while a container runs: systemd removes
 * a scope's cgroup the moment its last process is gone, often before the
 * exit is reaped here, and the counter read then finds nothing
 * (cri-o/cri-o#7035). The kernel notifies watchers of memory.events (v2)
 * when the counter moves, before the killed process is gone, so what is
 * read then is kept. Those notifications are rate-limited (a later one
 * waits on a timer a removed cgroup no longer fires), so the pod's cgroup,
 * the parent systemd keeps, whose counter counts its children's kills,
 * is the last witness. One inotify instance serves the pod's containers.
 */
static void oom_watch(struct proc *p)
{
	char path[PATH_MAX], *slash;
	if (!systemd || p->cgroup == NULL || strrchr(p->cgroup, '/') == NULL || snprintf(path, sizeof path, "%s/memory.events", p->cgroup) >= (int)sizeof path)
		return;
	if (ifd < 0 && (ifd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC)) >= 0 && watch(ifd, &oom_ev, EPOLLIN) < 0) {
		close(ifd);
		ifd = -1;
	}
	/* No memory.events (v1): the exit's own read stands, as before. */
	if (ifd < 0 || (p->wd = inotify_add_watch(ifd, path, IN_MODIFY)) < 0) {
		p->wd = 0;
		return;
	}
	*(slash = strrchr(p->cgroup, '/')) = 0;
	p->oombase = oom_count(p->cgroup);
	*slash = '/';
}

static void oom_event(void)
{
	char buf[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
	ssize_t n;
	while ((n = read(ifd, buf, sizeof buf)) > 0)
		for (char *e = buf; e < buf + n; e += sizeof(struct inotify_event) + ((struct inotify_event *)e)->len)
			for (struct proc *p = procs; p != NULL; p = p->next)
				if (p->wd == ((struct inotify_event *)e)->wd && oom_count(p->cgroup) > 0)
					p->oomseen = 1;
}

/* oom_killed tells whether the container, reaped with status st, was
 * killed by the OOM killer: a kill counted in its own cgroup, now or by
 * the watch; or, its cgroup gone already and a SIGKILL its end, a kill
 * counted in the pod's cgroup since the watch began. The second may name
 * a sibling's kill that came while this one was SIGKILLed for another
 * reason: rare, and its code (137) is the same. */
static uint32_t oom_killed(struct proc *p, int st)
{
	long long own = oom_count(p->cgroup), parent;
	int watched = p->wd > 0;
	char *slash;
	if (watched)
		inotify_rm_watch(ifd, p->wd);
	p->wd = 0;
	if (own > 0 || p->oomseen)
		return 1;
	if (own >= 0 || !watched || !WIFSIGNALED(st) || WTERMSIG(st) != SIGKILL)
		return 0;
	*(slash = strrchr(p->cgroup, '/')) = 0;
	parent = oom_count(p->cgroup);
	*slash = '/';
	return parent > p->oombase;
}

/* write_exit records an exit as exit.json in dir, atomically: written
 * whole under a temporary name, synced, renamed, the rename synced (where
 * the dir is on a disk). A reader sees no file or all of it, whenever this
 * process dies. The format is monitor.ReadExit's. */
static int write_exit(struct proc *p)
{
	char tmp[32], body[256], ts[40];
	ts[logw_time(ts, &p->finished)] = 0;
	int n = snprintf(body, sizeof body,
			 "{\"formatVersion\":1,\"code\":%d,\"signal\":%u,\"finishedAt\":\"%s\",\"oomKilled\":%s}\n",
			 (int)p->exit, p->sig, ts, p->oom ? "true" : "false");
	snprintf(tmp, sizeof tmp, ".exit-%d", (int)p->pid);
	int dir = open(p->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC), fd, r = -1, e;
	if (dir < 0)
		return -1;
	if ((fd = openat(dir, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600)) >= 0) {
		errno = EIO; /* a short write sets none */
		r = write(fd, body, (size_t)n) == n && fsync(fd) == 0 ? 0 : -1;
		if (close(fd) < 0 || r < 0 || renameat(dir, tmp, dir, "exit.json") < 0)
			r = -1;
		else
			fsync(dir);
	}
	e = errno;
	if (r < 0 && fd >= 0)
		unlinkat(dir, tmp, 0);
	close(dir);
	errno = e;
	return r;
}

/* proc_end ends a process's record: unlinked from procs already. */
static void proc_end(struct proc *p)
{
	for (int i = 0; i < 2; i++) {
		pipe_close(&p->out[i]);
		p->out[i].kind = 0;
	}
	pipe_close(&p->fifo);
	p->fifo.kind = 0;
	stdin_close(p);
	p->in.kind = 0;
	if (p->pidfd >= 0)
		close(p->pidfd);
	if (p->wd > 0)
		inotify_rm_watch(ifd, p->wd);
	if (p->job != NULL)
		p->job->p = NULL;
	logw_close(&p->log);
	p->next = dead_procs;
	dead_procs = p;
}

/* finish records the exit of a reaped process whose output is drained
 * (or has had DRAIN_MS to drain) and tells whoever waits for it. */
static void finish(struct proc *p)
{
	if (WIFSIGNALED(p->status)) {
		p->sig = (uint32_t)WTERMSIG(p->status);
		p->exit = 128 + (int32_t)p->sig;
	} else {
		p->exit = WEXITSTATUS(p->status);
	}
	if (p->kind != K_EXEC && write_exit(p) < 0)
		logmsg("podproc %s: record exit of %s in %s: %s", pod, p->id, p->dir, strerror(errno));
	p->state = PP_S_EXITED;
	p->drain = 0;
	stdin_close(p);
	while (p->waiters != NULL)
		answer_state(p->waiters, p); /* unlinks it */
	while (p->attached != NULL)
		send_exit(p->attached, p);
	if (p->kind == K_EXEC) {
		if (p->execc != NULL)
			send_exit(p->execc, p);
		unlink_proc(p);
		proc_end(p);
		return;
	}
	logmsg("podproc %s: %s (pid %d) exited: code %d signal %u oom %u", pod, p->id, (int)p->pid, (int)p->exit, p->sig, p->oom);
}

static int drained(struct proc *p)
{
	return p->out[0].fd < 0 && p->out[1].fd < 0;
}

/* settle records the exit once the process is reaped, its output drained
 * and what the container left destroyed. */
static void settle(struct proc *p)
{
	if (p->reaped && p->state != PP_S_EXITED && drained(p) && !p->destroying)
		finish(p);
}

/* The spawn helper's run: its request is JSON on its stdin (a memfd). */
static void jquote(FILE *f, const char *s)
{
	fputc('"', f);
	for (; *s; s++) {
		unsigned char ch = (unsigned char)*s;
		if (ch == '"' || ch == '\\')
			fprintf(f, "\\%c", ch);
		else if (ch < 0x20)
			fprintf(f, "\\u%04x", ch);
		else
			fputc(ch, f);
	}
	fputc('"', f);
}

static void jstr(FILE *f, const char *key, const char *s)
{
	fprintf(f, ",\"%s\":", key);
	jquote(f, s);
}

/* jb64: bytes as base64, as Go's encoding/json reads a []byte. */
static void jb64(FILE *f, const char *key, const uint8_t *d, size_t n)
{
	static const char t[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
	fprintf(f, ",\"%s\":\"", key);
	for (size_t i = 0; i < n; i += 3) {
		uint32_t v = (uint32_t)d[i] << 16 | (i + 1 < n ? (uint32_t)d[i + 1] << 8 : 0) | (i + 2 < n ? d[i + 2] : 0);
		char o[4] = {t[v >> 18 & 63], t[v >> 12 & 63], i + 1 < n ? t[v >> 6 & 63] : '=', i + 2 < n ? t[v & 63] : '='};
		fwrite(o, 1, 4, f);
	}
	fputc('"', f);
}

/* child_signals gives a child this process starts the signals' defaults:
 * none blocked, none ignored. */
static void child_signals(void)
{
	sigset_t none;
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	signal(SIGPIPE, SIG_DFL);
	signal(SIGHUP, SIG_DFL);
	signal(SIGINT, SIG_DFL);
}

/* helper_exec runs in the helper's process: its descriptors are 0 the
 * request, 1 /dev/null, 2 our log, 3 the result, 4 the ack, 5... the
 * stdio (monitor/spawnproto.go). */
static void helper_exec(int in, int res, int ack, const int *theirs, int nt)
{
	int src[8] = {in, open("/dev/null", O_WRONLY | O_CLOEXEC), 2, res, ack}, n = 5 + nt;
	for (int i = 0; i < nt; i++)
		src[5 + i] = theirs[i];
	for (int i = 0; i < n; i++) /* out of the way of 0..n-1 first */
		if ((src[i] = fcntl(src[i], F_DUPFD_CLOEXEC, 16)) < 0)
			_exit(127);
	for (int i = 0; i < n; i++)
		if (dup2(src[i], i) < 0)
			_exit(127);
	child_signals();
	char *argv[] = {(char *)spawn_bin, NULL};
	execve(spawn_bin, argv, environ);
	_exit(127);
}

/* spawn starts a helper run for id; fl are the stdio it is handed (theirs),
 * or J_JOIN's pid; msg the request's arguments. The job answers once the
 * helper has. */
static struct job *spawn(int op, const char *id, const char *dir, const int *theirs, int nt, uint32_t fl)
{
	int in = memfd_create("spawn-request", MFD_CLOEXEC), res[2] = {-1, -1}, ack[2] = {-1, -1}, e;
	struct job *j = calloc(1, sizeof *j);
	FILE *f = in < 0 ? NULL : fdopen(fcntl(in, F_DUPFD_CLOEXEC, 0), "w");
	if (j == NULL || f == NULL)
		goto fail;
	fprintf(f, "{\"op\":\"%s\",\"format\":\"lines\",\"systemd\":%s", op == J_CREATE && (fl & PP_FL_RESTORE) ? "restore" : ops[op],
		systemd ? "true" : "false");
	jstr(f, "root", root);
	jstr(f, "id", id);
	if (dir != NULL)
		jstr(f, "dir", dir);
	if (op == J_CREATE || op == J_EXEC)
		fprintf(f, ",\"stdin\":%s,\"stdout\":%s,\"stderr\":%s,\"tty\":%s", fl & PP_FL_STDIN ? "true" : "false",
			fl & PP_FL_STDOUT ? "true" : "false", fl & PP_FL_STDERR ? "true" : "false", fl & PP_FL_TTY ? "true" : "false");
	if (op == J_EXEC) {
		fprintf(f, ",\"width\":%u,\"height\":%u,\"args\":[", (unsigned)msg.width, (unsigned)msg.height);
		for (unsigned i = 0; i < msg.nargv; i++) {
			if (i > 0)
				fputc(',', f);
			jquote(f, msg.argv[i]);
		}
		fputc(']', f);
	}
	if (op == J_UPDATE)
		jb64(f, "resources", msg.data, msg.ndata);
	if (op == J_JOIN) {
		fprintf(f, ",\"pid\":%u", fl);
		jstr(f, "cgroup", msg.scope);
	}
	fputc('}', f);
	e = fclose(f);
	f = NULL;
	if (e != 0 || lseek(in, 0, SEEK_SET) < 0 || pipe2(res, O_CLOEXEC) < 0 || pipe2(ack, O_CLOEXEC) < 0)
		goto fail;
	pid_t pid = fork();
	if (pid == 0)
		helper_exec(in, res[1], ack[0], theirs, nt);
	if (pid < 0)
		goto fail;
	close_all(&in, 1);
	close_all(&res[1], 1);
	close_all(&ack[0], 1);
	*j = (struct job){.kind = EV_JOB, .fd = res[0], .ack = ack[1], .console = -1, .op = op, .helper = pid, .pidfd = -1,
			  .master = -1, .deadline = now_ms() + SPAWN_MS, .ours = {-1, -1, -1}, .next = jobs};
	fcntl(res[0], F_SETFL, O_NONBLOCK);
	if (watch(res[0], j, EPOLLIN) == 0) {
		jobs = j;
		return j;
	}
	kill(pid, SIGKILL); /* cannot happen short of ENOMEM; reaped as an orphan */
fail:
	e = errno;
	if (f != NULL)
		fclose(f);
	close_all(res, 2);
	close_all(ack, 2);
	close_all(&in, 1);
	free(j);
	errno = e;
	return NULL;
}

/* recv_fd receives the terminal's master the container's init sent on
 * the console socket before the helper answered. */
static int recv_fd(int s)
{
	char b[256];
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} u;
	struct iovec iov = {b, sizeof b};
	struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof u.buf};
	int fd = -1;
	if (recvmsg(s, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC) < 0)
		return -1;
	struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
	if (cm != NULL && cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS && cm->cmsg_len == CMSG_LEN(sizeof(int)))
		memcpy(&fd, CMSG_DATA(cm), sizeof fd);
	else
		errno = EBADMSG;
	return fd;
}

static void watch_output(struct proc *p)
{
	for (int i = 0; i < 2; i++)
		if (p->out[i].fd >= 0 && watch(p->out[i].fd, &p->out[i], EPOLLIN) < 0)
			pipe_close(&p->out[i]); /* its output is lost; its exit is not */
}

static void job_end(struct job *j)
{
	struct job **jp = &jobs;
	while (*jp != j)
		jp = &(*jp)->next;
	*jp = j->next;
	if (j->fd >= 0) {
		epoll_ctl(epfd, EPOLL_CTL_DEL, j->fd, NULL);
		close(j->fd);
	}
	if (j->ack >= 0)
		close(j->ack);
	if (j->console >= 0)
		close(j->console);
	for (int i = 0; i < j->nours; i++)
		if (j->ours[i] >= 0)
			close(j->ours[i]);
	free(j->err);
	j->kind = 0;
	j->next = dead_jobs;
	dead_jobs = j;
}

static void fifo_read(struct pipe_ev *pe, int dead);

/* plain_destroy removes what an exited container of its own PID
 * namespace left where that is only directories (SpawnResult.Plain): its
 * cgroups, emptied by the kernel with its init, and libcontainer's
 * state, sparing a helper run on every stop. -1: the helper does it. */
static int plain_destroy(struct proc *p)
{
	static const char *const files[] = {"exec.fifo", "state.json", ""};
	char path[PATH_MAX];
	for (char *d = p->cgdirs, *nl; (nl = strchr(d, '\n')) != NULL; d = nl + 1) {
		*nl = 0;
		int r = rmdir(d);
		*nl = '\n';
		if (r < 0 && errno != ENOENT)
			return -1;
	}
	for (int i = 0; i < 3; i++) {
		snprintf(path, sizeof path, "%s/%s/%s", root, p->id, files[i]);
		if ((i < 2 ? unlink(path) : rmdir(path)) < 0 && errno != ENOENT)
			return -1;
	}
	return 0;
}


/* reaped records that a process ended (st, at t), and has its exit
 * recorded as soon as it may be. */
static void reaped(struct proc *p, int st, const struct timespec *t)
{
	p->reaped = 1;
	p->status = st;
	p->finished = *t;
	if (p->pidfd >= 0)
		close(p->pidfd);
	p->pidfd = -1;
	p->oom = p->cgroup != NULL && oom_killed(p, st);
	if (p->fifo.fd >= 0)
		fifo_read(&p->fifo, 1);
	if (p->kind == K_CTR && (p->cgdirs == NULL || plain_destroy(p) < 0)) {
		/* Kill what it left in its cgroup (so the pipes they hold reach
		 * EOF), remove the cgroup and the state. */
		if ((p->job = spawn(J_DESTROY, p->id, NULL, NULL, 0, 0)) != NULL) {
			p->job->p = p;
			p->destroying = 1;
		}
	}
	/* Once what it left is destroyed, the output has DRAIN_MS to drain. */
	p->drain = p->destroying ? 0 : now_ms() + DRAIN_MS;
	settle(p);
}

static void job_done(struct job *j);

/* job_parse reads the helper's result, read whole: lines "pid N", "memcg
 * DIR", "cgroup DIR", "plain", "error TEXT", "ok" (monitor.SpawnFormatLines),
 * each line cut at its end. Returns whether it said ok. */
static int job_parse(struct job *j)
{
	int okay = 0;
	j->res[j->n] = 0;
	for (char *l = j->res, *nl; *l; l = nl) {
		if ((nl = strchr(l, '\n')) != NULL)
			*nl++ = 0;
		else
			nl = l + strlen(l);
		if (strncmp(l, "pid ", 4) == 0)
			j->pid = atoi(l + 4);
		else if (strncmp(l, "memcg ", 6) == 0)
			j->memcg = l + 6;
		else if (strncmp(l, "error ", 6) == 0)
			j->fault = l + 6;
		else if (strcmp(l, "ok") == 0)
			okay = 1;
		else if (strcmp(l, "plain") == 0)
			j->plain = 1;
	}
	return okay;
}

/* job_result takes the helper's result. The process it made, still the
 * helper's unreaped child (so the pid is its), gets a pidfd; then the
 * helper may exit, and the caller is answered once it has: the process
 * is this one's child by then. */
static void job_result(struct job *j)
{
	int okay = job_parse(j);
	const char *id = j->p != NULL ? j->p->id : "?";
	if (j->fault == NULL && !okay) {
		snprintf(j->why, sizeof j->why, "%s %s: the spawn helper ended without an answer", ops[j->op], id);
		j->fault = j->why;
	} else if (j->fault == NULL && (j->op == J_CREATE || j->op == J_EXEC)) {
		if (j->pid <= 0 || (j->pidfd = (int)syscall(SYS_pidfd_open, j->pid, 0)) < 0) {
			snprintf(j->why, sizeof j->why, "%s %s: no process (pid %d): %s", ops[j->op], id, (int)j->pid, strerror(errno));
			j->fault = j->why;
		} else if (j->console >= 0 && (j->master = recv_fd(j->console)) < 0) {
			snprintf(j->why, sizeof j->why, "%s %s: receive the terminal: %s", ops[j->op], id, strerror(errno));
			j->fault = j->why;
			syscall(SYS_pidfd_send_signal, j->pidfd, SIGKILL, NULL, 0);
			close(j->pidfd); /* reaped as an orphan */
			j->pidfd = -1;
		}
	}
	epoll_ctl(epfd, EPOLL_CTL_DEL, j->fd, NULL);
	close(j->fd);
	close(j->ack); /* the helper may exit: the process is held, or none */
	j->fd = j->ack = -1;
	j->eof = 1;
	if (j->helper == 0)
		job_done(j);
}

/* created makes a container's record of a create that succeeded. */
static void created(struct job *j, struct proc *p, struct conn *c)
{
	p->pid = j->pid;
	p->pidfd = j->pidfd;
	/* A restored process tree runs already: there is no fifo to open. */
	p->state = j->restore ? PP_S_RUNNING : PP_S_CREATED;
	p->cgroup = j->memcg != NULL ? strdup(j->memcg) : NULL;
	oom_watch(p);
	/* Its cgroups, for plain_destroy, each "cgroup DIR" line as
	 * "DIR\n": the result's size bounds them. */
	if (j->plain && (p->cgdirs = calloc(1, j->n + 1)) != NULL)
		for (size_t i = 0; i < j->n; i += strlen(j->res + i) + 1)
			if (strncmp(j->res + i, "cgroup ", 7) == 0)
				strcat(strcat(p->cgdirs, j->res + i + 7), "\n");
	if (j->master >= 0) {
		fcntl(j->master, F_SETFL, O_NONBLOCK);
		p->out[0] = (struct pipe_ev){EV_PIPE, j->master, 1, p};
		p->in.fd = fcntl(j->master, F_DUPFD_CLOEXEC, 0);
	}
	watch_output(p);
	for (struct conn *w = p->waiters, *nx; w != NULL; w = nx) {
		nx = w->next;
		if (w->flags) /* a STATUS that waited for the create */
			answer_state(w, p);
	}
	logmsg("podproc %s: %s %s (pid %d)", pod, j->restore ? "restored" : "created", p->id, (int)p->pid);
	if (c != NULL) {
		answer_pid(c, p->pid, NULL, 0);
		conn_close(c);
	}
}

/* create_failed has what a helper that failed half-way left destroyed: a
 * state dir that would block the next create with this id, an init
 * waiting on its fifo. The caller is answered once it is gone. */
static void create_failed(struct job *j, struct proc *p, struct conn *c)
{
	struct job *d = spawn(J_DESTROY, p->id, NULL, NULL, 0, 0);
	if (d != NULL && (d->err = strdup(j->fault)) != NULL && c != NULL) {
		d->c = c;
		c->held = &d->c;
	} else if (c != NULL) {
		fail(c, PP_C_FAILED, "%s", j->fault);
	}
	while (p->waiters != NULL)
		fail(p->waiters, PP_C_NOT_FOUND, "%s: its create failed", p->id);
	unlink_proc(p);
	proc_end(p);
}

/* execed makes the record of an exec's process and hands berth its stdio. */
static void execed(struct job *j, struct proc *p, struct conn *c)
{
	p->pid = j->pid;
	p->pidfd = j->pidfd;
	p->state = PP_S_RUNNING;
	p->next = procs;
	procs = p;
	if (j->master >= 0)
		j->ours[j->nours++] = j->master;
	if (c == NULL && !j->gone) {
		proc_kill(p, SIGKILL); /* berth hung up: nobody reads */
	} else if (c != NULL) {
		c->mode = M_EXEC;
		c->p = p;
		p->execc = c;
		if (answer_pid(c, p->pid, j->ours, j->nours) < 0)
			conn_close(c);
	}
}

/* job_done acts on the result once the helper is gone. */
static void job_done(struct job *j)
{
	struct proc *p = j->p;
	struct conn *c = j->c;
	if (c != NULL)
		c->held = NULL;
	if (j->fault != NULL && j->op == J_DESTROY)
		logmsg("podproc %s: destroy what %s left: %s", pod, j->err ? "a failed create" : p != NULL ? p->id : "?", j->fault);
	else if (j->fault != NULL)
		logmsg("podproc %s: %s", pod, j->fault);
	if (j->op == J_CREATE && j->fault == NULL)
		created(j, p, c);
	else if (j->op == J_CREATE)
		create_failed(j, p, c);
	else if (j->op == J_EXEC && j->fault == NULL)
		execed(j, p, c);
	else if (j->op == J_EXEC)
		proc_end(p);
	if (j->op == J_DESTROY && p != NULL) { /* the output now has DRAIN_MS to reach EOF */
		p->destroying = 0;
		p->job = NULL;
		p->drain = now_ms() + DRAIN_MS;
		settle(p);
	}
	/* The process a create or exec made ended before its helper. */
	if ((j->op == J_CREATE || j->op == J_EXEC) && j->fault == NULL && j->gone)
		reaped(p, j->status, &j->finished);
	if (c != NULL && (j->op == J_UPDATE || j->op == J_DESTROY || (j->op == J_EXEC && j->fault != NULL))) {
		if (j->err != NULL || j->fault != NULL)
			fail(c, PP_C_FAILED, "%s", j->err != NULL ? j->err : j->fault);
		else
			ok(c);
	}
	j->p = NULL;
	job_end(j);
}

static void job_read(struct job *j)
{
	ssize_t n = read(j->fd, j->res + j->n, sizeof j->res - 1 - j->n);
	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	if (n > 0 && (j->n += (size_t)n) < sizeof j->res - 1)
		return;
	job_result(j);
}

/* fifo_read: libcontainer's init writes a byte to its exec fifo once it
 * is let go, then runs the container's program. dead: it was reaped. */
static void fifo_read(struct pipe_ev *pe, int dead)
{
	struct proc *p = pe->p;
	char b[16], path[PATH_MAX];
	ssize_t n = read(pe->fd, b, sizeof b);
	if (n < 0 && (errno == EAGAIN || errno == EINTR) && !dead)
		return;
	pipe_close(pe);
	struct conn *c = p->starter;
	if (n > 0) {
		p->state = PP_S_RUNNING;
		if (snprintf(path, sizeof path, "%s/%s/exec.fifo", root, p->id) < (int)sizeof path)
			unlink(path);
		logmsg("podproc %s: started %s", pod, p->id);
		if (c != NULL)
			ok(c);
	} else if (c != NULL) {
		fail(c, dead ? PP_C_NOT_RUNNING : PP_C_FAILED, "%s: %s", p->id,
		     dead ? "not running" : "its init closed its exec fifo without starting");
	}
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
		for (struct job *j = jobs; j != NULL; j = j->next) {
			if (j->eof && j->pid == pid && !j->gone) {
				/* Its process, ended before the helper: kept for
				 * job_done, whose record is not made yet. */
				j->gone = 1;
				j->status = st;
				clock_gettime(CLOCK_REALTIME, &j->finished);
				pid = -1; /* no record has it */
				break;
			}
			if (j->helper != pid)
				continue;
			j->helper = 0;
			if (j->eof)
				job_done(j); /* unlinks j */
			break;
		}
		struct timespec now;
		clock_gettime(CLOCK_REALTIME, &now);
		/* An orphan of a container (a subreaper's lot) is just reaped. */
		for (struct proc *p = procs; p != NULL; p = p->next)
			if (p->pid == pid && !p->reaped) {
				reaped(p, st, &now);
				break;
			}
	}
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
		/* To each attached client at once, or it is cut off: the
		 * process never waits for a client, nor does this one hold
		 * output for it. */
		for (struct conn *c = p->attached, *next; c != NULL; c = next) {
			next = c->next;
			uint8_t h[PP_HDR] = {PP_MAGIC, PP_VERSION, pe->stream == 1 ? PP_F_STDOUT : PP_F_STDERR, 0, (uint8_t)n,
					     (uint8_t)(n >> 8), 0, 0};
			if (!(c->flags & (pe->stream == 1 ? PP_FL_STDOUT : PP_FL_STDERR)))
				continue;
			if (send_frame(c->fd, h, sizeof h, rbuf, (size_t)n, NULL, 0) < 0) {
				logmsg("podproc %s: %s: an attached client is too slow: cut off", pod, p->id);
				conn_close(c);
			}
		}
		return;
	}
	pipe_close(pe); /* EOF, or EIO: a terminal whose other side is gone */
	settle(p);
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
		free(p->cgroup);
		free(p->cgdirs);
		free(p);
	}
	while (dead_jobs != NULL) {
		struct job *j = dead_jobs;
		dead_jobs = j->next;
		free(j);
	}
}

static struct proc *proc_new(int kind, const char *id, const char *dir)
{
	/* The id and dir follow the record, in one allocation. */
	size_t ni = strlen(id) + 1, nd = dir != NULL ? strlen(dir) + 1 : 0;
	struct proc *p = calloc(1, sizeof *p + ni + nd);
	if (p == NULL)
		return NULL;
	p->kind = kind;
	p->pidfd = p->log.fd = -1;
	p->out[0] = p->out[1] = (struct pipe_ev){EV_PIPE, -1, 0, p};
	p->fifo = (struct pipe_ev){EV_FIFO, -1, 0, p};
	p->in = (struct pipe_ev){EV_STDIN, -1, 0, p};
	p->id = memcpy((char *)(p + 1), id, ni);
	p->dir = dir != NULL ? memcpy(p->id + ni, dir, nd) : NULL;
	return p;
}

/* stdio makes a process's pipes: theirs[] to hand it, in the order of
 * monitor/spawnproto.go (stdin if asked, stdout, stderr), or the console
 * socket alone with a terminal. Returns how many, -1 on failure. */
static int stdio(struct proc *p, uint32_t fl, int theirs[3], int *console)
{
	int n = 0, fds[2];
	if (fl & PP_FL_TTY) {
		if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) < 0)
			return -1;
		*console = fds[0];
		theirs[n++] = fds[1];
		return n;
	}
	if (fl & PP_FL_STDIN) {
		if (pipe2(fds, O_CLOEXEC) < 0)
			return -1;
		theirs[n++] = fds[0];
		p->in.fd = fds[1];
		fcntl(fds[1], F_SETFL, O_NONBLOCK);
	}
	for (int i = 0; i < 2; i++) {
		if (!(fl & (i == 0 ? PP_FL_STDOUT : PP_FL_STDERR)))
			continue;
		if (pipe2(fds, O_CLOEXEC) < 0)
			return -1;
		p->out[i].fd = fds[0];
		p->out[i].stream = i + 1;
		theirs[n++] = fds[1];
		fcntl(fds[0], F_SETFL, O_NONBLOCK);
	}
	return n;
}

/* unlink_exit removes a stale exit.json: an earlier run's exit must not
 * read as this one's. */
static void unlink_exit(const char *dir)
{
	char old[PATH_MAX];
	if (snprintf(old, sizeof old, "%s/exit.json", dir) < (int)sizeof old)
		unlink(old);
}

/* child runs in the new process: its cgroups, its user namespace's root
 * once go says the maps are written, its stdio (and sync pipe at fd 3),
 * its network namespace, then the program (exe: opened before a user
 * namespace could hide it). What fails is reported on errfd: the step,
 * then the errno. */
static void child(int fds[3], int syncfd, int errfd, int go[2], int exe)
{
	char b;
	if (go[1] >= 0)
		close(go[1]);
	int e[3] = {0, 0, 0}, fd;
	child_signals();
	setsid();
	for (unsigned i = 0; i < msg.njoin; i++, e[2]++) { /* "0": the writer itself */
		char path[PATH_MAX];
		snprintf(path, sizeof path, "%s/cgroup.procs", msg.join[i]);
		if ((fd = open(path, O_WRONLY | O_CLOEXEC)) < 0 || write(fd, "0", 1) != 1)
			goto fail;
		close(fd);
	}
	e[0] = 1;
	if (go[0] >= 0 && (read(go[0], &b, 1) != 1 ||
			   (msg.uidmap != NULL && (setgroups(0, NULL) < 0 || setresgid(0, 0, 0) < 0 || setresuid(0, 0, 0) < 0))))
		goto fail;
	e[0] = 2;
	for (int i = 0; i < 3; i++)
		if (dup2(fds[i], i) < 0)
			goto fail;
	if (syncfd >= 0 && dup2(syncfd, 3) < 0)
		goto fail;
	e[0] = 3;
	if (msg.netns != NULL && ((fd = open(msg.netns, O_RDONLY | O_CLOEXEC)) < 0 || setns(fd, CLONE_NEWNET) < 0))
		goto fail;
	e[0] = 4;
	if (exe >= 0)
		fexecve(exe, (char *const *)msg.argv, (char *const *)msg.envp);
	else
		execve(msg.argv[0], (char *const *)msg.argv, (char *const *)msg.envp);
fail:
	e[1] = errno;
	(void)!write(errfd, e, sizeof e);
	_exit(127);
}

/* write_maps writes the uid and gid maps of RUN's child's user namespace. */
static int write_maps(pid_t pid)
{
	const char *maps[2] = {msg.uidmap, msg.gidmap}, *files[2] = {"uid_map", "gid_map"};
	for (int i = 0; i < 2; i++) {
		char path[64];
		snprintf(path, sizeof path, "/proc/%d/%s", (int)pid, files[i]);
		int fd = open(path, O_WRONLY | O_CLOEXEC);
		ssize_t n = fd < 0 ? -1 : write(fd, maps[i], strlen(maps[i]));
		int err = errno;
		if (fd >= 0)
			close(fd);
		if (n != (ssize_t)strlen(maps[i])) {
			snprintf(why, sizeof why, "run %s: write %s: %s", msg.id, files[i], strerror(err));
			return -1;
		}
	}
	return 0;
}

/* join_scope has the spawn helper move pid, RUN's child waiting for its
 * go byte, into the cgroup msg.scope names through the systemd driver: a
 * transient scope systemd starts over D-Bus with the pid in it, which this
 * process does not speak. RUN is pause's, the first thing a pod process
 * does, so the loop waits for it, bounded as every helper run is. */
static int join_scope(pid_t pid)
{
	struct job *j = spawn(J_JOIN, msg.id, NULL, NULL, 0, (uint32_t)pid);
	long long left = SPAWN_MS;
	ssize_t n = 1;
	if (j == NULL) {
		snprintf(why, sizeof why, "run %s: join cgroup %s: %s", msg.id, msg.scope, strerror(errno));
		return -1;
	}
	struct pollfd pf = {.fd = j->fd, .events = POLLIN};
	while (n != 0 && left > 0 && j->n < sizeof j->res - 1) {
		long long t = now_ms();
		if (poll(&pf, 1, (int)left) > 0 && (n = read(j->fd, j->res + j->n, sizeof j->res - 1 - j->n)) > 0)
			j->n += (size_t)n;
		else if (n < 0 && errno != EAGAIN && errno != EINTR)
			break;
		left -= now_ms() - t;
	}
	if (n != 0) /* over its time, or unreadable: killed */
		kill(j->helper, SIGKILL);
	close(j->ack); /* the helper may exit */
	j->ack = -1;
	waitpid(j->helper, NULL, 0);
	int okay = job_parse(j) && j->fault == NULL;
	if (!okay)
		snprintf(why, sizeof why, "run %s: join cgroup %s: %s", msg.id, msg.scope,
			 j->fault ? j->fault : "the spawn helper ended without an answer");
	job_end(j);
	return okay ? 0 : -1;
}

static int run(struct conn *c)
{
	if (msg.argv[0][0] != '/')
		return fail(c, PP_C_INVALID, "run %s: the program must be an absolute path, not %s", msg.id, msg.argv[0]);
	struct proc *p = proc_new(K_RUN, msg.id, msg.dir);
	int theirs[3] = {-1, -1, -1}, ep[2] = {-1, -1}, sp[2] = {-1, -1}, gp[2] = {-1, -1}, console = -1, exe = -1, null = -1, std[3];
	if ((msg.uidmap == NULL) != (msg.gidmap == NULL) || (msg.uidmap != NULL && msg.netns != NULL))
		return fail(c, PP_C_INVALID, "run %s: a user namespace needs both maps, and makes its own network namespace", msg.id);
	if (msg.scope != NULL && (spawn_bin == NULL || !systemd || msg.njoin > 0))
		return fail(c, PP_C_UNSUPPORTED, "run %s: a scope is joined through the spawn helper, with the systemd driver, alone", msg.id);
	if (p == NULL)
		return fail(c, PP_C_FAILED, "out of memory");
	p->stdin_once = (msg.flags & PP_FL_STDIN_ONCE) != 0;
	p->cgroup = msg.cgroup ? strdup(msg.cgroup) : NULL;
	if (msg.cgroup && p->cgroup == NULL) {
		errno = ENOMEM;
		goto fail;
	}
	if (logw_open(&p->log, msg.log) < 0) {
		snprintf(why, sizeof why, "%s: open log %s: %s", msg.id, msg.log, strerror(errno));
		goto failwhy;
	}
	/* Without a log nobody reads its output (pause's): /dev/null, as its
	 * stdin is without the stdin flag; a pipe costs the pod's memory. */
	uint32_t fl = (msg.flags & PP_FL_STDIN) | (msg.log != NULL ? PP_FL_STDOUT | PP_FL_STDERR : 0);
	if ((null = open("/dev/null", O_RDWR | O_CLOEXEC)) < 0 || stdio(p, fl, theirs, &console) < 0)
		goto fail;
	for (int i = 0, k = 0; i < 3; i++) /* stdio's order, of those asked */
		std[i] = fl & (i == 0 ? PP_FL_STDIN : i == 1 ? PP_FL_STDOUT : PP_FL_STDERR) ? theirs[k++] : null;
	if (pipe2(ep, O_CLOEXEC) < 0 || ((msg.flags & PP_FL_SYNC) && pipe2(sp, O_CLOEXEC) < 0) ||
	    ((msg.uidmap != NULL || msg.scope != NULL) && pipe2(gp, O_CLOEXEC) < 0) ||
	    (msg.uidmap != NULL && (exe = open(msg.argv[0], O_RDONLY | O_CLOEXEC)) < 0))
		goto fail;
	unlink_exit(msg.dir);
	unsigned long ns = (msg.flags & PP_FL_NEWIPC ? CLONE_NEWIPC : 0) | (msg.flags & PP_FL_NEWUTS ? CLONE_NEWUTS : 0) |
			   (msg.flags & PP_FL_NEWPID ? CLONE_NEWPID : 0) | (msg.uidmap != NULL ? CLONE_NEWUSER : 0) |
			   (msg.uidmap != NULL && !(msg.flags & PP_FL_HOSTNET) ? CLONE_NEWNET : 0);
	pid_t pid = (pid_t)syscall(SYS_clone, SIGCHLD | ns, 0, 0, 0, 0);
	if (pid < 0)
		goto fail;
	if (pid == 0)
		child(std, sp[1], ep[1], gp, exe);
	close(ep[1]);
	ep[1] = -1;
	if (gp[1] >= 0) { /* its user namespace's maps, its scope, then let it go on */
		if ((msg.uidmap != NULL && write_maps(pid) < 0) || (msg.scope != NULL && join_scope(pid) < 0)) {
			kill(pid, SIGKILL);
			waitpid(pid, NULL, 0);
			goto failwhy;
		}
		(void)!write(gp[1], "g", 1);
	}
	int e[3];
	ssize_t n;
	do
		n = read(ep[0], e, sizeof e);
	while (n < 0 && errno == EINTR);
	if (n == (ssize_t)sizeof e) {
		static const char *const steps[] = {"join cgroup", "become root of its user namespace", "stdio", "enter netns", "exec"};
		/* It never ran: reaped here, not recorded. */
		waitpid(pid, NULL, 0);
		snprintf(why, sizeof why, "run %s: %s %s: %s", msg.id, steps[(unsigned)e[0] % 5],
			 e[0] == 0 ? msg.join[e[2] & (PP_MAX_JOIN - 1)] : e[0] == 3 ? msg.netns : msg.argv[0], strerror(e[1]));
		goto failwhy;
	}
	p->pid = pid;
	p->state = PP_S_RUNNING;
	watch_output(p);
	p->next = procs;
	procs = p;
	logmsg("podproc %s: %s runs %s (pid %d)", pod, p->id, msg.argv[0], (int)pid);
	/* Berth reads the sync pipe itself: pause's "ok" once set up. */
	answer_pid(c, pid, sp, sp[0] >= 0);
	conn_close(c);
	goto out;
fail:
	snprintf(why, sizeof why, "run %s: %s", msg.id, strerror(errno));
failwhy:
	proc_end(p);
	fail(c, PP_C_FAILED, "%s", why);
out:
	close_all(theirs, 3);
	close_all(ep, 2);
	close_all(sp, 2);
	close_all(gp, 2);
	close_all(&exe, 1);
	close_all(&null, 1);
	return 0;
}

/* create and exec hand the work to a helper run; the caller is answered
 * when it is done (job_done). */
static int create_exec(struct conn *c, struct proc *ctr)
{
	int theirs[3] = {-1, -1, -1}, console = -1, nt, op = ctr == NULL ? J_CREATE : J_EXEC;
	uint32_t fl = msg.flags;
	if (op == J_CREATE && (fl & PP_FL_RESTORE) && (fl & PP_FL_TTY))
		return fail(c, PP_C_INVALID, "%s: a restore has no terminal", msg.id);
	if (op == J_CREATE)
		fl = ((fl & PP_FL_TTY) ? PP_FL_TTY : (fl & PP_FL_STDIN) | PP_FL_STDOUT | PP_FL_STDERR) | (fl & PP_FL_RESTORE);
	struct proc *p = proc_new(op == J_CREATE ? K_CTR : K_EXEC, msg.id, op == J_CREATE ? msg.dir : NULL);
	struct job *j = NULL;
	if (p == NULL)
		return fail(c, PP_C_FAILED, "out of memory");
	p->stdin_once = (msg.flags & PP_FL_STDIN_ONCE) != 0;
	p->tty = (fl & PP_FL_TTY) != 0;
	if (op == J_CREATE && logw_open(&p->log, msg.log) < 0) {
		snprintf(why, sizeof why, "%s: open log %s: %s", msg.id, msg.log, strerror(errno));
		goto fail;
	}
	if ((nt = stdio(p, fl, theirs, &console)) < 0 ||
	    (j = spawn(op, msg.id, op == J_CREATE ? msg.dir : ctr->dir, theirs, nt, fl)) == NULL) {
		snprintf(why, sizeof why, "%s %s: %s", ops[op], msg.id, strerror(errno));
		goto fail;
	}
	close_all(theirs, 3);
	j->console = console;
	j->restore = (fl & PP_FL_RESTORE) != 0;
	j->c = c;
	j->p = p;
	c->mode = M_HELD;
	c->held = &j->c;
	if (op == J_CREATE) {
		unlink_exit(msg.dir);
		p->next = procs; /* state 0: the id is taken, the container not made yet */
		procs = p;
		return 0;
	}
	/* Berth's ends of the exec's stdio, sent with the response. */
	for (int i = 0; i < 2 && !p->tty; i++)
		if (p->out[i].fd >= 0)
			j->ours[j->nours++] = p->out[i].fd;
	if (p->in.fd >= 0) {
		memmove(j->ours + 1, j->ours, sizeof(int) * (size_t)j->nours++);
		j->ours[0] = p->in.fd;
	}
	p->out[0].fd = p->out[1].fd = p->in.fd = -1;
	return 0;
fail:
	close_all(theirs, 3);
	if (console >= 0)
		close(console);
	proc_end(p);
	return fail(c, PP_C_FAILED, "%s", why);
}

static int start(struct conn *c, struct proc *p)
{
	char path[PATH_MAX];
	if (p->state != PP_S_CREATED || p->fifo.fd >= 0)
		return fail(c, PP_C_FAILED, "%s: already started", p->id);
	/* The init waits, blocked opening its fifo for writing, until it is
	 * opened for reading; not blocking here, its byte comes to the loop. */
	snprintf(path, sizeof path, "%s/%s/exec.fifo", root, p->id);
	if ((p->fifo.fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC)) < 0 || watch(p->fifo.fd, &p->fifo, EPOLLIN) < 0) {
		int e = errno;
		pipe_close(&p->fifo);
		return fail(c, PP_C_FAILED, "%s: start: exec fifo %s: %s", p->id, path, strerror(e));
	}
	p->starter = c;
	c->held = &p->starter;
	c->mode = M_HELD;
	return 0;
}

static int attach(struct conn *c, struct proc *p)
{
	struct pp_enc e;
	if (p->state == PP_S_EXITED)
		return fail(c, PP_C_NOT_RUNNING, "%s: not running", p->id);
	begin(&e, c, PP_C_OK);
	if (respond(c, &e, NULL, 0) < 0)
		return conn_close(c);
	c->mode = M_ATTACH;
	c->have = 0;
	c->flags = msg.flags;
	c->p = p;
	c->next = p->attached;
	p->attached = c;
	if (p->inpend != NULL)
		pause_input(p, 1);
	return 0;
}

/* wait_for holds a WAIT, or a STATUS (status) of a container being
 * created, among p's waiters. */
static int wait_for(struct conn *c, struct proc *p, int status)
{
	c->mode = M_WAIT;
	c->flags = (uint32_t)status;
	c->p = p;
	c->next = p->waiters;
	p->waiters = c;
	return 0;
}

static int dispatch(struct conn *c)
{
	struct proc *p = NULL;
	struct pp_enc e;
	if (msg.id != NULL && msg.type != PP_RUN && msg.type != PP_CREATE && (p = find(msg.id)) != NULL && p->state == 0 &&
	    (msg.type == PP_STATUS || msg.type == PP_WAIT)) {
		/* Being created: answered once it is (or is not), so that
		 * berth's undo of a create it gave up on finds what to kill. */
		return wait_for(c, p, msg.type == PP_STATUS);
	}
	if (msg.id != NULL && msg.type != PP_RUN && msg.type != PP_CREATE && (p == NULL || p->state == 0))
		return fail(c, PP_C_NOT_FOUND, "%s: no such container", msg.id);
	if ((msg.type == PP_RUN || msg.type == PP_CREATE) && (quit || find(msg.id) != NULL))
		return fail(c, quit ? PP_C_INVALID : PP_C_EXISTS, quit ? "pod %s: shutting down" : "%s exists", quit ? pod : msg.id);
	if ((msg.type == PP_CREATE || msg.type == PP_EXEC || msg.type == PP_UPDATE) && spawn_bin == NULL)
		return fail(c, PP_C_UNSUPPORTED, "pod %s: its process has no spawn helper", pod);
	switch (msg.type) {
	case PP_PING:
		begin(&e, c, PP_C_OK);
		pp_put_u32(&e, PP_T_PID, (uint32_t)getpid());
		pp_put_u32(&e, PP_T_VMIN, PP_MIN_VERSION);
		pp_put_u32(&e, PP_T_VMAX, PP_VERSION);
		return reply(c, &e);
	case PP_RUN:
		return run(c);
	case PP_CREATE:
		return create_exec(c, NULL);
	case PP_START:
	case PP_EXEC:
	case PP_UPDATE:
		if (p->kind != K_CTR)
			return fail(c, PP_C_INVALID, "%s: not a container", p->id);
		if (p->reaped || p->state == PP_S_EXITED || (msg.type != PP_START && p->state != PP_S_RUNNING))
			return fail(c, PP_C_NOT_RUNNING, "%s: not running", p->id);
		if (msg.type == PP_START)
			return start(c, p);
		if (msg.type == PP_EXEC)
			return create_exec(c, p);
		struct job *j = spawn(J_UPDATE, p->id, p->dir, NULL, 0, 0);
		if (j == NULL)
			return fail(c, PP_C_FAILED, "update %s: %s", p->id, strerror(errno));
		j->c = c;
		c->held = &j->c;
		c->mode = M_HELD;
		return 0;
	case PP_ATTACH:
		return attach(c, p);
	case PP_SIGNAL:
		/* Unreaped, the pid is still this process's: never another's. */
		if (p->reaped)
			return fail(c, PP_C_NOT_RUNNING, "%s: not running", p->id);
		if (proc_kill(p, (int)msg.signal) < 0)
			return fail(c, PP_C_FAILED, "%s: signal %u: %s", p->id, msg.signal, strerror(errno));
		return ok(c);
	case PP_WAIT:
		if (p->state == PP_S_EXITED)
			return answer_state(c, p);
		/* Answered by finish; the caller hanging up ends it sooner. */
		return wait_for(c, p, 0);
	case PP_STATUS:
		return answer_state(c, p);
	case PP_REOPEN:
		if (logw_reopen(&p->log) < 0)
			return fail(c, PP_C_FAILED, "%s: reopen log %s: %s", p->id, p->log.path, strerror(errno));
		return ok(c);
	case PP_DELETE:
		if (p->state != PP_S_EXITED)
			return fail(c, PP_C_BUSY, "%s: still running", p->id);
		unlink_proc(p);
		proc_end(p);
		return ok(c);
	case PP_SHUTDOWN: {
		/* Execs do not keep the pod: as berth's own hangup would, the
		 * end kills them, and their helpers. */
		int running = 0;
		for (p = procs; p != NULL; p = p->next)
			running += p->kind != K_EXEC && p->state != PP_S_EXITED;
		for (struct job *j = jobs; j != NULL; j = j->next)
			running += j->op != J_EXEC;
		if (running > 0)
			return fail(c, PP_C_BUSY, "pod %s still has %d running processes", pod, running);
		for (p = procs; p != NULL; p = p->next)
			if (!p->reaped)
				proc_kill(p, SIGKILL);
		for (struct job *j = jobs; j != NULL; j = j->next)
			if (j->helper > 0)
				kill(j->helper, SIGKILL);
		quit = 1;
		return ok(c);
	}
	}
	return fail(c, PP_C_INVALID, "message type %u is not a request", msg.type);
}

/* stream_frame handles a frame an attached client sent. */
static int stream_frame(struct conn *c)
{
	const char *reason;
	struct proc *p = c->p;
	if (pp_parse(c->buf, c->have, &msg, &reason) != PP_OK)
		return conn_close(c);
	c->have = 0;
	switch (msg.type) {
	case PP_F_STDIN:
		if (c->flags & PP_FL_STDIN)
			input(p, msg.data, msg.ndata);
		break;
	case PP_F_STDIN_CLOSE:
		stdin_once(p);
		break;
	case PP_F_RESIZE:
		if (p->tty && p->in.fd >= 0) {
			struct winsize ws = {.ws_row = (unsigned short)msg.height, .ws_col = (unsigned short)msg.width};
			ioctl(p->in.fd, TIOCSWINSZ, &ws);
		}
		break;
	default:
		return conn_close(c);
	}
	uint8_t *nb = c->len > 0 ? realloc(c->buf, PP_HDR) : NULL;
	if (nb != NULL)
		c->buf = nb;
	return 0;
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

static int conn_read(struct conn *c, uint32_t events)
{
	if (c->mode != M_CALL && c->mode != M_ATTACH) /* nothing more is expected */
		return conn_close(c);
	if (c->mode == M_ATTACH && c->p->inpend != NULL && (c->flags & PP_FL_STDIN)) /* paused */
		return events & (EPOLLHUP | EPOLLERR) ? conn_close(c) : 0;
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
	if (c->have == 0 && c->buf[0] == '{' && c->mode == M_CALL) {
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
	if (c->mode == M_ATTACH)
		return stream_frame(c);
	const char *reason;
	int r = pp_parse(c->buf, c->have, &msg, &reason);
	c->type = c->buf[2];
	if (r == PP_E_VERSION)
		return fail(c, PP_C_VERSION, "pod %s: its process speaks protocol versions %d to %d, not %u", pod, PP_MIN_VERSION,
			    PP_VERSION, c->buf[1]);
	if (r != PP_OK)
		return fail(c, PP_C_INVALID, "invalid request: %s", reason);
	if (msg.type >= PP_NOPS || msg.type == 0)
		return fail(c, PP_C_INVALID, "message type %u is not a request", msg.type);
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
		    (c->buf = malloc(PP_HDR)) == NULL || watch(fd, c, EPOLLIN | EPOLLRDHUP) < 0) {
			if (c != NULL)
				free(c->buf);
			free(c);
			close(fd);
			continue;
		}
		c->kind = EV_CONN;
		c->fd = fd;
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
	/* The helpers talk to systemd on its private socket, not through
	 * dbus-daemon, which caps one user's connections (cmd/berth-monitor). */
	if (systemd)
		setenv("DBUS_SYSTEM_BUS_ADDRESS", "none:", 1);
	unlink(path);
	mode_t old = umask(0177);
	int r = bind(lfd, (struct sockaddr *)&sa, sizeof sa);
	umask(old);
	if (r < 0 || listen(lfd, 64) < 0 || watch(lfd, &listen_ev, EPOLLIN) < 0 || watch(sfd, &signal_ev, EPOLLIN) < 0)
		return -1;
	return 0;
}

/* next_timer: the ms to the next exit whose output is drained for too long,
 * or helper run that takes too long; -1: none. */
static int next_timer(void)
{
	long long next = -1, now = now_ms();
	for (struct proc *p = procs; p != NULL; p = p->next)
		if (p->drain > 0 && (next < 0 || p->drain < next))
			next = p->drain;
	for (struct job *j = jobs; j != NULL; j = j->next)
		if (j->helper > 0 && j->deadline != LLONG_MAX && (next < 0 || j->deadline < next))
			next = j->deadline;
	return next < 0 ? -1 : next <= now ? 0 : (int)(next - now);
}

/* ready_say tells the ready fd (and the log, unless all is well) how the
 * start went, and ends it with EOF. */
static int ready_say(int ready, int code, const char *text)
{
	if (ready >= 0) {
		(void)!write(ready, text, strlen(text));
		close(ready);
	}
	if (code != 0)
		logmsg("%s", text);
	return code;
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
		else if (strcmp(argv[i], "--spawn") == 0)
			spawn_bin = argv[i + 1];
		else if (strcmp(argv[i], "--root") == 0)
			root = argv[i + 1];
		else if (strcmp(argv[i], "--systemd") == 0)
			systemd = strcmp(argv[i + 1], "1") == 0;
	}
	/* Nothing inherited but stdio and the ready fd stays open: what this
	 * process holds is no container's to see. (musl has no close_range.) */
	if ((ready == 3 || syscall(SYS_close_range, 3, ready < 3 ? ~0u : (unsigned)ready - 1, 0) == 0) &&
	    (ready < 3 || syscall(SYS_close_range, (unsigned)ready + 1, ~0u, 0) == 0)) {
	} else { /* a kernel before 5.9 */
		for (long fd = 3, max = sysconf(_SC_OPEN_MAX); fd < max; fd++)
			if (fd != ready)
				close((int)fd);
	}
	if (sock == NULL || argc % 2 == 0 || (spawn_bin == NULL) != (root == NULL))
		return ready_say(ready, 2, "usage: berth-podproc --socket PATH [--pod ID] [--ready-fd FD] [--spawn BIN --root DIR [--systemd 1]]");
	if (setup(sock) < 0) {
		snprintf(why, sizeof why, "berth-podproc: serve %s: %s", sock, strerror(errno));
		return ready_say(ready, 1, why);
	}
	ready_say(ready, 0, "ok");
	logmsg("podproc %s: serving %s (pid %d)", pod, sock, (int)getpid());
	while (!quit) {
		struct epoll_event evs[16];
		int n = epoll_wait(epfd, evs, 16, next_timer());
		for (int i = 0; i < n; i++) {
			struct ev *ev = evs[i].data.ptr;
			switch (ev->kind) { /* 0: ended earlier in this batch */
			case EV_LISTEN: accept_all(); break;
			case EV_SIGNAL: reap(); break;
			case EV_PIPE: pipe_read((struct pipe_ev *)ev); break;
			case EV_FIFO: fifo_read((struct pipe_ev *)ev, 0); break;
			case EV_STDIN: input_ready(((struct pipe_ev *)ev)->p); break;
			case EV_JOB: job_read((struct job *)ev); break;
			case EV_OOM: oom_event(); break;
			case EV_CONN: conn_read((struct conn *)ev, evs[i].events); break;
			}
		}
		bury();
		long long now = now_ms();
		for (struct proc *p = procs, *nx; p != NULL; p = nx) {
			nx = p->next; /* finish ends an exec's record */
			if (p->drain > 0 && p->drain <= now && p->state != PP_S_EXITED)
				finish(p);
		}
		for (struct job *j = jobs; j != NULL; j = j->next)
			if (j->helper > 0 && j->deadline <= now) {
				logmsg("podproc %s: the spawn helper's %s took over %d s: killed", pod, ops[j->op], SPAWN_MS / 1000);
				kill(j->helper, SIGKILL); /* unreaped: still its pid */
				j->deadline = LLONG_MAX;
			}
	}
	unlink(sock);
	logmsg("podproc %s: done", pod);
	return 0;
}
