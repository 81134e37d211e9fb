/* Unit tests of the frame parser and encoder and of the CRI log writer.
 * Run as ./unit DIR (a scratch directory for log files); exits non-zero
 * on the first failure. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "logw.h"
#include "proto.h"

static int failures;
#define CHECK(c)                                                                    \
	do {                                                                        \
		if (!(c)) {                                                         \
			fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #c); \
			failures++;                                                 \
		}                                                                   \
	} while (0)

static uint8_t buf[PP_HDR + PP_MAX_PAYLOAD + 64];
static struct pp_msg m;

static int parse(size_t n)
{
	const char *why;
	return pp_parse(buf, n, &m, &why);
}

/* field appends a raw field to an encoder, bypassing its checks. */
static void field(struct pp_enc *e, uint8_t tag, const void *p, size_t n)
{
	uint8_t h[3] = {tag, (uint8_t)n, (uint8_t)(n >> 8)};
	pp_put_raw(e, h, 3);
	pp_put_raw(e, p, n);
}

static void test_roundtrip(void)
{
	struct pp_enc e;
	pp_begin(&e, buf, sizeof buf, PP_RUN);
	pp_put_str(&e, PP_T_ID, "ctr1");
	pp_put_str(&e, PP_T_DIR, "/run/x");
	pp_put_str(&e, PP_T_ARG, "/bin/sh");
	pp_put_str(&e, PP_T_ARG, "-c");
	pp_put_str(&e, PP_T_ARG, "");
	pp_put_str(&e, PP_T_ENV, "A=b");
	pp_put_u32(&e, PP_T_FLAGS, PP_FL_STDIN | PP_FL_NEWPID);
	size_t n = pp_end(&e);
	CHECK(n > PP_HDR);
	CHECK(parse(n) == PP_OK);
	CHECK(m.type == PP_RUN && m.version == PP_VERSION);
	CHECK(strcmp(m.id, "ctr1") == 0 && strcmp(m.dir, "/run/x") == 0);
	CHECK(m.nargv == 3 && strcmp(m.argv[1], "-c") == 0 && m.argv[2][0] == 0 && m.argv[3] == NULL);
	CHECK(m.nenv == 1 && strcmp(m.envp[0], "A=b") == 0 && m.envp[1] == NULL);
	CHECK(m.flags == (PP_FL_STDIN | PP_FL_NEWPID));
	CHECK(m.log == NULL);
	CHECK(parse(n - 1) == PP_E_SHORT);
	CHECK(parse(3) == PP_E_SHORT);
	CHECK(parse(0) == PP_E_SHORT);
	buf[n] = 0;
	CHECK(parse(n + 1) == PP_E_INVALID); /* bytes past the frame */

	/* A response, with every response field. */
	pp_begin(&e, buf, sizeof buf, PP_STATUS | PP_RESPONSE);
	pp_put_u32(&e, PP_T_CODE, PP_C_OK);
	pp_put_u32(&e, PP_T_PID, 4242);
	pp_put_u32(&e, PP_T_STATE, PP_S_EXITED);
	pp_put_u32(&e, PP_T_EXIT, (uint32_t)-1);
	pp_put_u32(&e, PP_T_EXITSIG, 9);
	pp_put_u64(&e, PP_T_FINISHED, 0x0123456789abcdefull);
	pp_put_u32(&e, PP_T_OOM, 1);
	pp_put_str(&e, PP_T_MSG, "hi");
	n = pp_end(&e);
	CHECK(parse(n) == PP_OK);
	CHECK(m.pid == 4242 && m.state == PP_S_EXITED && m.exit == -1 && m.exitsig == 9 && m.oom == 1);
	CHECK(m.finished == 0x0123456789abcdefull && strcmp(m.msg, "hi") == 0);

	/* Raw stream frames carry data, NULs included. */
	pp_begin(&e, buf, sizeof buf, PP_F_STDOUT);
	pp_put_raw(&e, "a\0b", 3);
	n = pp_end(&e);
	CHECK(parse(n) == PP_OK && m.ndata == 3 && memcmp(m.data, "a\0b", 3) == 0);
	pp_begin(&e, buf, sizeof buf, PP_F_RESIZE);
	pp_put_u32(&e, PP_T_WIDTH, 80);
	pp_put_u32(&e, PP_T_HEIGHT, 24);
	CHECK(parse(pp_end(&e)) == PP_OK && m.width == 80 && m.height == 24);
	pp_begin(&e, buf, sizeof buf, PP_F_RESIZE);
	pp_put_u32(&e, PP_T_WIDTH, 80);
	CHECK(parse(pp_end(&e)) == PP_E_INVALID);
	pp_begin(&e, buf, sizeof buf, PP_UPDATE);
	pp_put_str(&e, PP_T_ID, "c");
	pp_put_bytes(&e, PP_T_BLOB, "{\"x\":1}", 7);
	CHECK(parse(pp_end(&e)) == PP_OK && m.ndata == 7);
}

/* One request with one field: what parse says. */
static int one(uint8_t type, uint8_t tag, const void *v, size_t n)
{
	struct pp_enc e;
	pp_begin(&e, buf, sizeof buf, type);
	field(&e, tag, v, n);
	return parse(pp_end(&e));
}

static int with_id(uint8_t type, const char *id, uint8_t tag, uint32_t v)
{
	struct pp_enc e;
	pp_begin(&e, buf, sizeof buf, type);
	pp_put_str(&e, PP_T_ID, id);
	if (tag)
		pp_put_u32(&e, tag, v);
	return parse(pp_end(&e));
}

static void test_invalid(void)
{
	struct pp_enc e;
	uint32_t len;
	pp_begin(&e, buf, sizeof buf, PP_PING);
	size_t n = pp_end(&e);
	CHECK(n == PP_HDR && parse(n) == PP_OK);
	buf[0] = '{';
	CHECK(parse(n) == PP_E_MAGIC && pp_header(buf, 1, &len) == PP_E_MAGIC);
	buf[0] = PP_MAGIC;
	buf[3] = 1;
	CHECK(parse(n) == PP_E_INVALID);
	buf[3] = 0;
	buf[1] = PP_MIN_VERSION - 1;
	CHECK(parse(n) == PP_E_VERSION);
	buf[1] = PP_VERSION + 1;
	CHECK(parse(n) == PP_E_VERSION);
	CHECK(pp_header(buf, n, &len) == PP_E_VERSION && len == 0);
	buf[1] = PP_VERSION;
	buf[4] = 1, buf[5] = 0, buf[6] = 1; /* 65537 */
	CHECK(pp_header(buf, n, &len) == PP_E_INVALID);
	/* Types. */
	pp_begin(&e, buf, sizeof buf, 0);
	CHECK(parse(pp_end(&e)) == PP_E_INVALID);
	pp_begin(&e, buf, sizeof buf, PP_NOPS);
	CHECK(parse(pp_end(&e)) == PP_E_INVALID);
	pp_begin(&e, buf, sizeof buf, PP_RESPONSE); /* to no request in particular: a code is still required */
	CHECK(parse(pp_end(&e)) == PP_E_INVALID);
	pp_begin(&e, buf, sizeof buf, PP_RESPONSE);
	pp_put_u32(&e, PP_T_CODE, PP_C_INVALID);
	CHECK(parse(pp_end(&e)) == PP_OK);
	pp_begin(&e, buf, sizeof buf, PP_PING | PP_RESPONSE); /* no code */
	CHECK(parse(pp_end(&e)) == PP_E_INVALID);
	/* Fields against the schema. */
	CHECK(one(PP_PING, PP_T_ID, "a", 2) == PP_E_INVALID);
	CHECK(one(PP_STATUS, PP_T_ID, "a", 2) == PP_OK);
	CHECK(one(PP_STATUS, 0, "a", 2) == PP_E_INVALID);
	CHECK(one(PP_STATUS, 63, "a", 2) == PP_E_INVALID);
	CHECK(one(PP_STATUS, 200, "a", 2) == PP_E_INVALID);
	CHECK(one(PP_STATUS, PP_T_CODE, "abcd", 4) == PP_E_INVALID); /* a response's field */
	CHECK(one(PP_STATUS, PP_T_ID, "a", 1) == PP_E_INVALID);      /* no NUL */
	CHECK(one(PP_STATUS, PP_T_ID, "a\0b", 4) == PP_E_INVALID);   /* NUL inside */
	CHECK(one(PP_STATUS, PP_T_ID, "", 0) == PP_E_INVALID);
	CHECK(one(PP_STATUS, PP_T_ID, "", 1) == PP_E_INVALID); /* empty id */
	CHECK(with_id(PP_STATUS, "a/b", 0, 0) == PP_E_INVALID);
	CHECK(with_id(PP_STATUS, "a b", 0, 0) == PP_E_INVALID);
	CHECK(with_id(PP_STATUS, "a\x7f", 0, 0) == PP_E_INVALID);
	char id[200];
	memset(id, 'x', sizeof id);
	id[128] = 0;
	CHECK(with_id(PP_STATUS, id, 0, 0) == PP_OK);
	id[128] = 'x', id[129] = 0;
	CHECK(with_id(PP_STATUS, id, 0, 0) == PP_E_INVALID);
	CHECK(with_id(PP_SIGNAL, "a", PP_T_SIGNAL, 9) == PP_OK && m.signal == 9);
	CHECK(with_id(PP_SIGNAL, "a", 0, 0) == PP_E_INVALID); /* signal required */
	CHECK(with_id(PP_SIGNAL, "a", PP_T_SIGNAL, 0) == PP_E_INVALID);
	CHECK(with_id(PP_SIGNAL, "a", PP_T_SIGNAL, 65) == PP_E_INVALID);
	CHECK(with_id(PP_ATTACH, "a", PP_T_FLAGS, PP_FL_ALL) == PP_OK);
	CHECK(with_id(PP_ATTACH, "a", PP_T_FLAGS, PP_FL_ALL + 1) == PP_E_INVALID);
	/* Repeats, lengths. */
	pp_begin(&e, buf, sizeof buf, PP_STATUS);
	pp_put_str(&e, PP_T_ID, "a");
	pp_put_str(&e, PP_T_ID, "b");
	CHECK(parse(pp_end(&e)) == PP_E_INVALID);
	pp_begin(&e, buf, sizeof buf, PP_SIGNAL);
	pp_put_str(&e, PP_T_ID, "a");
	field(&e, PP_T_SIGNAL, "\x09\0\0", 3);
	CHECK(parse(pp_end(&e)) == PP_E_INVALID);
	pp_begin(&e, buf, sizeof buf, PP_STATUS | PP_RESPONSE);
	pp_put_u32(&e, PP_T_CODE, 0);
	field(&e, PP_T_FINISHED, "1234", 4);
	CHECK(parse(pp_end(&e)) == PP_E_INVALID);
	pp_begin(&e, buf, sizeof buf, PP_STATUS);
	pp_put_raw(&e, "\x01\x05", 2); /* a truncated field header */
	CHECK(parse(pp_end(&e)) == PP_E_INVALID);
	pp_begin(&e, buf, sizeof buf, PP_STATUS);
	pp_put_raw(&e, "\x01\x05\x00" "ab", 5); /* longer than the frame */
	CHECK(parse(pp_end(&e)) == PP_E_INVALID);
	/* Argument counts. */
	pp_begin(&e, buf, sizeof buf, PP_RUN);
	pp_put_str(&e, PP_T_ID, "a");
	pp_put_str(&e, PP_T_DIR, "/d");
	for (int i = 0; i < PP_MAX_ARGS; i++)
		pp_put_str(&e, PP_T_ARG, "x");
	n = pp_end(&e);
	CHECK(parse(n) == PP_OK && m.nargv == PP_MAX_ARGS && m.argv[PP_MAX_ARGS] == NULL);
	pp_begin(&e, buf, sizeof buf, PP_RUN);
	for (int i = 0; i <= PP_MAX_ARGS; i++)
		pp_put_str(&e, PP_T_ENV, "x");
	CHECK(parse(pp_end(&e)) == PP_E_INVALID);
	pp_begin(&e, buf, sizeof buf, PP_RUN); /* no id, dir, argv */
	CHECK(parse(pp_end(&e)) == PP_E_INVALID);
}

static void test_encoder(void)
{
	struct pp_enc e;
	uint8_t small[16];
	pp_begin(&e, small, sizeof small, PP_STATUS);
	pp_put_str(&e, PP_T_ID, "0123456789");
	CHECK(pp_end(&e) == 0 && e.err);
	pp_begin(&e, small, 4, PP_PING);
	CHECK(pp_end(&e) == 0);
	static char big[PP_MAX_STR + 1];
	memset(big, 'a', PP_MAX_STR);
	pp_begin(&e, buf, sizeof buf, PP_RUN);
	pp_put_str(&e, PP_T_DIR, big); /* PP_MAX_STR bytes and its NUL: too long */
	CHECK(pp_end(&e) == 0);
	big[PP_MAX_STR - 1] = 0;
	pp_begin(&e, buf, sizeof buf, PP_RUN);
	pp_put_str(&e, PP_T_ID, "a");
	pp_put_str(&e, PP_T_DIR, big);
	pp_put_str(&e, PP_T_ARG, "/x");
	size_t n = pp_end(&e);
	CHECK(n > 0 && parse(n) == PP_OK && strlen(m.dir) == PP_MAX_STR - 1);
	/* The payload limit. */
	pp_begin(&e, buf, sizeof buf, PP_RUN);
	for (int i = 0; i < 17; i++)
		pp_put_str(&e, PP_T_ENV, big);
	CHECK(pp_end(&e) == 0);
}

static char dir[512];

static char *slurp(const char *name)
{
	static char data[1 << 20];
	char path[600];
	snprintf(path, sizeof path, "%s/%s", dir, name);
	int fd = open(path, O_RDONLY);
	ssize_t n = fd < 0 ? 0 : read(fd, data, sizeof data - 1);
	data[n < 0 ? 0 : n] = 0;
	if (fd >= 0)
		close(fd);
	return data;
}

static void test_time(void)
{
	static const struct {
		long long s;
		long ns;
		const char *want;
	} cases[] = {
		{0, 0, "1970-01-01T00:00:00Z"},
		{1700000000, 123456789, "2023-11-14T22:13:20.123456789Z"},
		{1700000000, 500000000, "2023-11-14T22:13:20.5Z"},
		{1700000000, 1000, "2023-11-14T22:13:20.000001Z"},
		{1709164800, 0, "2024-02-29T00:00:00Z"},
		{951868800, 10, "2000-03-01T00:00:00.00000001Z"},
		{4107542400, 0, "2100-03-01T00:00:00Z"},
		{946684799, 0, "1999-12-31T23:59:59Z"},
		{1234567890, 0, "2009-02-13T23:31:30Z"},
		{253402300799, 999999999, "9999-12-31T23:59:59.999999999Z"},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		char out[64];
		struct timespec ts = {(time_t)cases[i].s, cases[i].ns};
		out[logw_time(out, &ts)] = 0;
		if (strcmp(out, cases[i].want) != 0)
			fprintf(stderr, "time %lld.%ld: %s, want %s\n", cases[i].s, cases[i].ns, out, cases[i].want);
		CHECK(strcmp(out, cases[i].want) == 0);
	}
}

static void test_log(void)
{
	struct logw l;
	char path[600], moved[600];
	struct timespec ts = {1700000000, 120000000};
	snprintf(path, sizeof path, "%s/ctr.log", dir);
	snprintf(moved, sizeof moved, "%s/ctr.log.1", dir);
	CHECK(logw_open(&l, path) == 0);
	logw_chunk(&l, 1, "a\nb", 3, &ts);
	logw_chunk(&l, 2, "c\n\n", 3, &ts);
	logw_chunk(&l, 1, "", 0, &ts);
	CHECK(strcmp(slurp("ctr.log"), "2023-11-14T22:13:20.12Z stdout F a\n"
					"2023-11-14T22:13:20.12Z stdout P b\n"
					"2023-11-14T22:13:20.12Z stderr F c\n"
					"2023-11-14T22:13:20.12Z stderr F \n") == 0);
	/* Rotation: the kubelet renames the file, then asks for a reopen. */
	CHECK(rename(path, moved) == 0);
	logw_chunk(&l, 1, "old\n", 4, &ts);
	CHECK(logw_reopen(&l) == 0);
	logw_chunk(&l, 1, "new\n", 4, &ts);
	CHECK(strstr(slurp("ctr.log.1"), "stdout F old\n") != NULL);
	CHECK(strcmp(slurp("ctr.log"), "2023-11-14T22:13:20.12Z stdout F new\n") == 0);
	logw_close(&l);

	/* Long lines are cut at LOGW_MAX_LINE; many short ones are all kept,
	 * however the buffer is flushed. */
	CHECK(unlink(path) == 0);
	CHECK(logw_open(&l, path) == 0);
	static char big[3 * LOGW_MAX_LINE];
	memset(big, 'x', sizeof big);
	big[LOGW_MAX_LINE] = '\n';
	logw_chunk(&l, 1, big, LOGW_MAX_LINE + 1, &ts); /* exactly one record's worth, then its newline */
	logw_chunk(&l, 1, big, 2 * LOGW_MAX_LINE + 100, &ts);
	for (size_t i = 1; i < sizeof big; i += 2)
		big[i] = '\n';
	logw_chunk(&l, 2, big, sizeof big, &ts);
	logw_close(&l);
	char *d = slurp("ctr.log");
	int P = 0, F = 0, bad = 0;
	for (char *line = d; *line; line = strchr(line, '\n') + 1) {
		char *end = strchr(line, '\n');
		size_t hdr = strlen("2023-11-14T22:13:20.12Z stdout X ");
		if (end == NULL || (size_t)(end - line) < hdr || (size_t)(end - line) > hdr + LOGW_MAX_LINE) {
			bad++;
			break;
		}
		P += line[hdr - 2] == 'P';
		F += line[hdr - 2] == 'F';
	}
	CHECK(bad == 0);
	/* The first chunk: P of LOGW_MAX_LINE, F empty. The second: the same,
	 * then P of LOGW_MAX_LINE and P of 100. The third: an F per newline,
	 * one at every odd offset and one left at LOGW_MAX_LINE. */
	CHECK(P == 4);
	CHECK(F == 2 + 3 * LOGW_MAX_LINE / 2 + 1);
	CHECK(l.dropped == 0);

	/* No path: discarded. A directory that is not there: an error. */
	CHECK(logw_open(&l, NULL) == 0 && l.fd == -1);
	logw_chunk(&l, 1, "x\n", 2, &ts);
	logw_close(&l);
	snprintf(path, sizeof path, "%s/missing/ctr.log", dir);
	errno = 0;
	CHECK(logw_open(&l, path) < 0 && errno == ENOENT && l.path == NULL);
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: unit SCRATCH-DIR\n");
		return 2;
	}
	snprintf(dir, sizeof dir, "%s", argv[1]);
	test_roundtrip();
	test_invalid();
	test_encoder();
	test_time();
	test_log();
	if (failures) {
		fprintf(stderr, "%d checks failed\n", failures);
		return 1;
	}
	printf("unit: ok\n");
	return 0;
}
