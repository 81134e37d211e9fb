/* The frame parser and encoder (proto.h, docs/podproc.md). */
#include <string.h>

#include "proto.h"

enum { T_NONE, T_STR, T_U32, T_U64, T_BYTES };

/* Each tag's type, the member of struct pp_msg its value goes to (0: a
 * list or the data, set apart), and a u32's largest value. */
#define AT(f) (uint16_t)(offsetof(struct pp_msg, f) + 1)
#define ANY 0xffffffffu
static const struct {
	uint8_t type;
	uint16_t at;
	uint32_t max;
} tags[PP_NTAGS] = {
	[PP_T_ID] = {T_STR, AT(id), 0}, [PP_T_DIR] = {T_STR, AT(dir), 0}, [PP_T_LOG] = {T_STR, AT(log), 0},
	[PP_T_ARG] = {T_STR, 0, 0}, [PP_T_ENV] = {T_STR, 0, 0}, [PP_T_JOIN] = {T_STR, 0, 0},
	[PP_T_CGROUP] = {T_STR, AT(cgroup), 0}, [PP_T_NETNS] = {T_STR, AT(netns), 0}, [PP_T_UIDMAP] = {T_STR, AT(uidmap), 0},
	[PP_T_GIDMAP] = {T_STR, AT(gidmap), 0}, [PP_T_SCOPE] = {T_STR, AT(scope), 0}, [PP_T_MSG] = {T_STR, AT(msg), 0},
	[PP_T_FLAGS] = {T_U32, AT(flags), PP_FL_ALL}, [PP_T_SIGNAL] = {T_U32, AT(signal), 64},
	[PP_T_WIDTH] = {T_U32, AT(width), 0xffff}, [PP_T_HEIGHT] = {T_U32, AT(height), 0xffff},
	[PP_T_CODE] = {T_U32, AT(code), ANY}, [PP_T_PID] = {T_U32, AT(pid), ANY}, [PP_T_STATE] = {T_U32, AT(state), ANY},
	[PP_T_EXIT] = {T_U32, AT(exit), ANY}, [PP_T_EXITSIG] = {T_U32, AT(exitsig), ANY}, [PP_T_OOM] = {T_U32, AT(oom), ANY},
	[PP_T_VMIN] = {T_U32, AT(vmin), ANY}, [PP_T_VMAX] = {T_U32, AT(vmax), ANY},
	[PP_T_FINISHED] = {T_U64, AT(finished), 0}, [PP_T_BLOB] = {T_BYTES, 0, 0},
};

#define B(t) ((uint64_t)1 << (t))
#define EXITF (B(PP_T_EXIT) | B(PP_T_EXITSIG) | B(PP_T_FINISHED) | B(PP_T_OOM) | B(PP_T_MSG))
#define RESP (B(PP_T_CODE) | B(PP_T_MSG) | B(PP_T_PID) | B(PP_T_STATE) | EXITF | B(PP_T_VMIN) | B(PP_T_VMAX))

/* The schema: which fields a request may carry, and which it must. */
static const struct {
	uint64_t may, must;
} schema[PP_NOPS] = {
	[PP_PING] = {0, 0},
	[PP_RUN] = {B(PP_T_ID) | B(PP_T_DIR) | B(PP_T_LOG) | B(PP_T_ARG) | B(PP_T_ENV) | B(PP_T_FLAGS) | B(PP_T_CGROUP) | B(PP_T_NETNS) |
			    B(PP_T_JOIN) | B(PP_T_UIDMAP) | B(PP_T_GIDMAP) | B(PP_T_SCOPE),
		    B(PP_T_ID) | B(PP_T_DIR) | B(PP_T_ARG)},
	[PP_CREATE] = {B(PP_T_ID) | B(PP_T_DIR) | B(PP_T_LOG) | B(PP_T_FLAGS), B(PP_T_ID) | B(PP_T_DIR)},
	[PP_START] = {B(PP_T_ID), B(PP_T_ID)},
	[PP_SIGNAL] = {B(PP_T_ID) | B(PP_T_SIGNAL), B(PP_T_ID) | B(PP_T_SIGNAL)},
	[PP_WAIT] = {B(PP_T_ID), B(PP_T_ID)},
	[PP_STATUS] = {B(PP_T_ID), B(PP_T_ID)},
	[PP_EXEC] = {B(PP_T_ID) | B(PP_T_ARG) | B(PP_T_FLAGS) | B(PP_T_WIDTH) | B(PP_T_HEIGHT), B(PP_T_ID) | B(PP_T_ARG)},
	[PP_ATTACH] = {B(PP_T_ID) | B(PP_T_FLAGS), B(PP_T_ID)},
	[PP_REOPEN] = {B(PP_T_ID), B(PP_T_ID)},
	[PP_UPDATE] = {B(PP_T_ID) | B(PP_T_BLOB), B(PP_T_ID) | B(PP_T_BLOB)},
	[PP_DELETE] = {B(PP_T_ID), B(PP_T_ID)},
	[PP_SHUTDOWN] = {0, 0},
};

static uint32_t get32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

int pp_header(const uint8_t *buf, size_t n, uint32_t *len)
{
	if (n < 1)
		return PP_E_SHORT;
	if (buf[0] != PP_MAGIC)
		return PP_E_MAGIC;
	if (n < PP_HDR)
		return PP_E_SHORT;
	*len = get32(buf + 4);
	if (buf[3] != 0 || *len > PP_MAX_PAYLOAD)
		return PP_E_INVALID;
	if (buf[1] < PP_MIN_VERSION || buf[1] > PP_VERSION)
		return PP_E_VERSION;
	return PP_OK;
}

static int bad(const char **why, const char *what)
{
	*why = what;
	return PP_E_INVALID;
}

/* is_raw: a stream frame whose payload is data, not fields. */
static int is_raw(uint8_t t)
{
	return t == PP_F_STDOUT || t == PP_F_STDERR || t == PP_F_STDIN;
}

static uint64_t allowed(uint8_t t, uint64_t *must)
{
	*must = 0;
	if (t >= PP_RESPONSE && t < PP_RESPONSE + PP_NOPS) {
		*must = B(PP_T_CODE);
		return RESP;
	}
	if (t >= 1 && t < PP_NOPS) {
		*must = schema[t].must;
		return schema[t].may;
	}
	switch (t) {
	case PP_F_EXIT:
		*must = B(PP_T_EXIT);
		return EXITF;
	case PP_F_RESIZE:
		*must = B(PP_T_WIDTH) | B(PP_T_HEIGHT);
		return *must;
	case PP_F_STDIN_CLOSE:
		return 0;
	}
	return (uint64_t)-1; /* unknown type */
}

int pp_parse(const uint8_t *buf, size_t n, struct pp_msg *m, const char **why)
{
	uint32_t len;
	int r = pp_header(buf, n, &len);
	*why = "malformed header";
	if (r != PP_OK)
		return r;
	if (n < PP_HDR + (size_t)len)
		return PP_E_SHORT;
	if (n != PP_HDR + (size_t)len)
		return bad(why, "bytes past the frame");
	memset(m, 0, sizeof *m);
	m->version = buf[1];
	m->type = buf[2];
	const uint8_t *p = buf + PP_HDR, *end = p + len;
	if (is_raw(m->type)) {
		m->data = p;
		m->ndata = len;
		return PP_OK;
	}
	uint64_t must, may = allowed(m->type, &must);
	if (may == (uint64_t)-1)
		return bad(why, "unknown message type");
	while (p < end) {
		if (end - p < 3)
			return bad(why, "truncated field");
		uint8_t tag = p[0];
		size_t fl = (size_t)p[1] | (size_t)p[2] << 8;
		const uint8_t *v = p + 3;
		if ((size_t)(end - v) < fl)
			return bad(why, "field longer than the frame");
		p = v + fl;
		if (tag >= PP_NTAGS || tags[tag].type == T_NONE || !(may & B(tag)))
			return bad(why, "field not in this message's schema");
		int list = tag == PP_T_ARG || tag == PP_T_ENV || tag == PP_T_JOIN;
		if ((m->seen & B(tag)) && !list)
			return bad(why, "field repeated");
		m->seen |= B(tag);
		switch (tags[tag].type) {
		case T_STR:
			if (fl == 0 || fl > PP_MAX_STR || v[fl - 1] != 0 || memchr(v, 0, fl - 1) != NULL)
				return bad(why, "string not NUL-terminated, too long, or with a NUL inside");
			break;
		case T_U32:
			if (fl != 4)
				return bad(why, "u32 field of the wrong length");
			/* A flag unknown, a signal not 1-64, a terminal over 65535. */
			if (get32(v) > tags[tag].max || (tag == PP_T_SIGNAL && get32(v) == 0))
				return bad(why, "integer out of range");
			*(uint32_t *)((char *)m + tags[tag].at - 1) = get32(v);
			break;
		case T_U64:
			if (fl != 8)
				return bad(why, "u64 field of the wrong length");
			m->finished = (uint64_t)get32(v) | (uint64_t)get32(v + 4) << 32;
			break;
		case T_BYTES:
			m->data = v;
			m->ndata = (uint32_t)fl;
			break;
		}
		if (tags[tag].type != T_STR)
			continue;
		if (tag == PP_T_ID) {
			/* An id names files and is shown in messages: printable, no slash. */
			if (fl < 2 || fl > 129)
				return bad(why, "id empty or over 128 bytes");
			for (size_t i = 0; i + 1 < fl; i++)
				if (v[i] <= ' ' || v[i] >= 127 || v[i] == '/')
					return bad(why, "id with a character other than printable ASCII or with a slash");
		}
		if (!list) {
			*(const char **)((char *)m + tags[tag].at - 1) = (const char *)v;
			continue;
		}
		unsigned *n = tag == PP_T_ARG ? &m->nargv : tag == PP_T_ENV ? &m->nenv : &m->njoin;
		if (*n >= (tag == PP_T_JOIN ? PP_MAX_JOIN : PP_MAX_ARGS))
			return bad(why, "too many arguments, environment entries or cgroups to join");
		(tag == PP_T_ARG ? m->argv : tag == PP_T_ENV ? m->envp : m->join)[(*n)++] = (const char *)v;
	}
	if ((m->seen & must) != must)
		return bad(why, "a required field is missing");
	return PP_OK;
}

static void put(struct pp_enc *e, const void *p, size_t n)
{
	if (e->err || n > e->cap - e->len) {
		e->err = 1;
		return;
	}
	memcpy(e->buf + e->len, p, n);
	e->len += n;
}

static void put32le(uint8_t *b, uint32_t v)
{
	b[0] = (uint8_t)v;
	b[1] = (uint8_t)(v >> 8);
	b[2] = (uint8_t)(v >> 16);
	b[3] = (uint8_t)(v >> 24);
}

void pp_begin(struct pp_enc *e, uint8_t *buf, size_t cap, uint8_t type)
{
	uint8_t h[PP_HDR] = {PP_MAGIC, PP_VERSION, type, 0, 0, 0, 0, 0};
	e->buf = buf;
	e->cap = cap;
	e->len = 0;
	e->err = 0;
	put(e, h, sizeof h);
}

static void field(struct pp_enc *e, uint8_t tag, const void *p, size_t n)
{
	uint8_t h[3] = {tag, (uint8_t)n, (uint8_t)(n >> 8)};
	if (n > 0xffff) {
		e->err = 1;
		return;
	}
	put(e, h, sizeof h);
	put(e, p, n);
}

void pp_put_str(struct pp_enc *e, uint8_t tag, const char *s)
{
	size_t n = strlen(s) + 1;
	field(e, tag, s, n > PP_MAX_STR ? (size_t)-1 : n);
}

void pp_put_u32(struct pp_enc *e, uint8_t tag, uint32_t v)
{
	uint8_t b[4];
	put32le(b, v);
	field(e, tag, b, 4);
}

void pp_put_u64(struct pp_enc *e, uint8_t tag, uint64_t v)
{
	uint8_t b[8];
	put32le(b, (uint32_t)v);
	put32le(b + 4, (uint32_t)(v >> 32));
	field(e, tag, b, 8);
}

void pp_put_bytes(struct pp_enc *e, uint8_t tag, const void *p, size_t n)
{
	field(e, tag, p, n);
}

void pp_put_raw(struct pp_enc *e, const void *p, size_t n)
{
	put(e, p, n);
}

size_t pp_end(struct pp_enc *e)
{
	if (e->err || e->len - PP_HDR > PP_MAX_PAYLOAD)
		return 0;
	put32le(e->buf + 4, (uint32_t)(e->len - PP_HDR));
	return e->len;
}
