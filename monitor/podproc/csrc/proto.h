/*
 * The pod process's protocol (docs/podproc.md): fixed binary frames, each
 * an 8-byte header and a payload of typed fields. This header is the
 * schema; monitor/podproc/frame.go is the same schema in Go, and the tests
 * hold the two to each other.
 *
 * Header: magic, version, type, 0, payload length (u32, little-endian).
 * Field:  tag (u8), length (u16, little-endian), value. Strings carry
 *         their terminating NUL and no other; integers are little-endian
 *         of exactly their width.
 */
#ifndef PODPROC_PROTO_H
#define PODPROC_PROTO_H

#include <stddef.h>
#include <stdint.h>

#define PP_MAGIC 0xB7
/* Version 1 is the Go monitor's JSON lines; the frames start at 2. */
#define PP_VERSION 2
#define PP_MIN_VERSION 2
#define PP_HDR 8
/* The largest payload either side accepts in a request or response. */
#define PP_MAX_PAYLOAD 65536
#define PP_MAX_ARGS 256
#define PP_MAX_JOIN 16
#define PP_MAX_STR 4096 /* with its NUL */

/* Message types, numbered from 1 in this order. A response has its
 * request's type with PP_RESPONSE. */
enum {
	PP_PING = 1, PP_RUN, PP_CREATE, PP_START, PP_SIGNAL, PP_WAIT, PP_STATUS,
	PP_EXEC, PP_ATTACH, PP_REOPEN, PP_UPDATE, PP_DELETE, PP_SHUTDOWN,
	PP_NOPS,
	/* Stream frames, after an ATTACH or EXEC response. */
	PP_F_STDOUT = 0x40, /* raw payload */
	PP_F_STDERR = 0x41, /* raw payload */
	PP_F_EXIT = 0x42,   /* exit fields */
	PP_F_STDIN = 0x43,  /* raw payload */
	PP_F_STDIN_CLOSE = 0x44,
	PP_F_RESIZE = 0x45, /* width, height */
	PP_RESPONSE = 0x80,
};

/* Field tags: a request's below 32, a response's from 32. */
enum {
	PP_T_ID = 1,       /* str: container id (the pod's id: pause) */
	PP_T_DIR = 2,      /* str: the container's dir, where exit.json goes */
	PP_T_LOG = 3,      /* str: CRI log file */
	PP_T_ARG = 4,      /* str, repeated: argv */
	PP_T_ENV = 5,      /* str, repeated: envp */
	PP_T_FLAGS = 6,    /* u32: PP_FL_* */
	PP_T_SIGNAL = 7,   /* u32 */
	PP_T_WIDTH = 8,    /* u32 */
	PP_T_HEIGHT = 9,   /* u32 */
	PP_T_CGROUP = 10,  /* str: cgroup dir whose oom_kill counts the exit */
	PP_T_NETNS = 11,   /* str: netns to be born in (RUN, pause) */
	PP_T_BLOB = 12,    /* bytes: opaque to the pod process (UPDATE) */
	PP_T_JOIN = 13,    /* str, repeated: cgroup dirs RUN's child joins first */
	PP_T_UIDMAP = 14,  /* str: RUN in a new user (and network) namespace: uid_map */
	PP_T_GIDMAP = 15,  /* str: its gid_map */
	PP_T_SCOPE = 16,   /* str: RUN joins this OCI cgroupsPath through the spawn helper (systemd) */
	PP_T_CODE = 32,    /* u32: PP_C_* */
	PP_T_MSG = 33,     /* str */
	PP_T_PID = 34,     /* u32 */
	PP_T_STATE = 35,   /* u32: PP_S_* */
	PP_T_EXIT = 36,    /* i32: exit code (128+signal if signalled) */
	PP_T_EXITSIG = 37, /* u32 */
	PP_T_FINISHED = 38,/* u64: unix nanoseconds */
	PP_T_OOM = 39,     /* u32: 1 if killed by the OOM killer */
	PP_T_VMIN = 40,    /* u32 */
	PP_T_VMAX = 41,    /* u32 */
	PP_NTAGS = 64,
};

/* Flags. */
enum {
	PP_FL_STDIN = 1,
	PP_FL_STDIN_ONCE = 2,
	PP_FL_STDOUT = 4,
	PP_FL_STDERR = 8,
	PP_FL_TTY = 16,
	PP_FL_NEWIPC = 32,
	PP_FL_NEWUTS = 64,
	PP_FL_NEWPID = 128,
	PP_FL_SYNC = 256,    /* RUN: fd 3 a pipe, whose read end berth gets */
	PP_FL_HOSTNET = 512, /* RUN with a uid map: no network namespace of its own */
	PP_FL_RESTORE = 1024, /* CREATE: restored by CRIU from dir's checkpoint, running once made */
	PP_FL_ALL = 2047,
};

/* Response codes, numbered from 0 in this order. */
enum {
	PP_C_OK, PP_C_INVALID, PP_C_NOT_FOUND, PP_C_NOT_RUNNING, PP_C_BUSY,
	PP_C_VERSION, PP_C_UNSUPPORTED, PP_C_EXISTS, PP_C_FAILED,
};

/* Container states. */
enum { PP_S_CREATED = 1, PP_S_RUNNING = 2, PP_S_EXITED = 3 };

/* Parse results. */
enum {
	PP_OK = 0,
	PP_E_SHORT = -1,   /* not a whole frame yet */
	PP_E_MAGIC = -2,   /* not a frame at all */
	PP_E_VERSION = -3, /* a version this side does not serve */
	PP_E_INVALID = -4, /* a frame, but malformed or against the schema */
};

/* A decoded message. Strings and bytes point into the frame. */
struct pp_msg {
	uint8_t version, type;
	uint64_t seen; /* bit per tag present */
	const char *id, *dir, *log, *cgroup, *netns, *msg, *uidmap, *gidmap, *scope;
	const char *argv[PP_MAX_ARGS + 1]; /* NULL-terminated */
	const char *envp[PP_MAX_ARGS + 1];
	const char *join[PP_MAX_JOIN];
	unsigned nargv, nenv, njoin;
	const uint8_t *data; /* PP_T_BLOB, or a raw frame's payload */
	uint32_t ndata;
	uint32_t flags, signal, width, height;
	uint32_t code, pid, state, exitsig, oom, vmin, vmax;
	int32_t exit;
	uint64_t finished;
};

/*
 * pp_header checks the header in buf (n bytes, at least PP_HDR) and
 * stores the payload's length: PP_OK, PP_E_SHORT, PP_E_MAGIC,
 * PP_E_VERSION (len still set, so the frame can be skipped) or
 * PP_E_INVALID.
 */
int pp_header(const uint8_t *buf, size_t n, uint32_t *len);

/*
 * pp_parse decodes one whole frame (header and payload, n bytes) into m
 * and checks it against its type's schema. On PP_E_INVALID, *why says
 * what is wrong.
 */
int pp_parse(const uint8_t *buf, size_t n, struct pp_msg *m, const char **why);

/* An encoder into a caller's buffer; err is set once anything overflowed. */
struct pp_enc {
	uint8_t *buf;
	size_t cap, len;
	int err;
};

void pp_begin(struct pp_enc *e, uint8_t *buf, size_t cap, uint8_t type);
void pp_put_str(struct pp_enc *e, uint8_t tag, const char *s);
void pp_put_u32(struct pp_enc *e, uint8_t tag, uint32_t v);
void pp_put_u64(struct pp_enc *e, uint8_t tag, uint64_t v);
void pp_put_bytes(struct pp_enc *e, uint8_t tag, const void *p, size_t n);
void pp_put_raw(struct pp_enc *e, const void *p, size_t n);
/* pp_end sets the header's length and returns the frame's size, 0 on overflow. */
size_t pp_end(struct pp_enc *e);

#endif
