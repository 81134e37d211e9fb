/*
 * The request parser, fuzzed. Built with clang -fsanitize=fuzzer it is a
 * libFuzzer target; built without (gcc, -DRANDOM_DRIVER) its main feeds it
 * mutations of valid frames from a seeded generator:
 *
 *   fuzz [ITERATIONS [SEED]]
 *
 * Every input is copied into a buffer of exactly its size, so that the
 * sanitizers see any read past it. A frame that parses is encoded again
 * from what was parsed, and must parse to the same message.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proto.h"

static uint8_t again[PP_HDR + PP_MAX_PAYLOAD];

static void reencode(const struct pp_msg *m, struct pp_enc *e)
{
	pp_begin(e, again, sizeof again, m->type);
	if (m->type == PP_F_STDOUT || m->type == PP_F_STDERR || m->type == PP_F_STDIN) {
		pp_put_raw(e, m->data, m->ndata);
		return;
	}
	const char *strs[] = {m->id, m->dir, m->log, m->cgroup, m->netns, m->msg, m->uidmap, m->gidmap, m->scope};
	const uint8_t stags[] = {PP_T_ID, PP_T_DIR, PP_T_LOG, PP_T_CGROUP, PP_T_NETNS, PP_T_MSG, PP_T_UIDMAP, PP_T_GIDMAP, PP_T_SCOPE};
	for (int i = 0; i < 9; i++)
		if (strs[i] != NULL)
			pp_put_str(e, stags[i], strs[i]);
	for (unsigned i = 0; i < m->nargv; i++)
		pp_put_str(e, PP_T_ARG, m->argv[i]);
	for (unsigned i = 0; i < m->nenv; i++)
		pp_put_str(e, PP_T_ENV, m->envp[i]);
	for (unsigned i = 0; i < m->njoin; i++)
		pp_put_str(e, PP_T_JOIN, m->join[i]);
	const uint32_t nums[] = {m->flags, m->signal, m->width, m->height, m->code, m->pid,
				 m->state, (uint32_t)m->exit, m->exitsig, m->oom, m->vmin, m->vmax};
	const uint8_t ntags[] = {PP_T_FLAGS, PP_T_SIGNAL, PP_T_WIDTH, PP_T_HEIGHT, PP_T_CODE, PP_T_PID,
				 PP_T_STATE, PP_T_EXIT, PP_T_EXITSIG, PP_T_OOM, PP_T_VMIN, PP_T_VMAX};
	for (int i = 0; i < 12; i++)
		if (m->seen & ((uint64_t)1 << ntags[i]))
			pp_put_u32(e, ntags[i], nums[i]);
	if (m->seen & ((uint64_t)1 << PP_T_FINISHED))
		pp_put_u64(e, PP_T_FINISHED, m->finished);
	if (m->seen & ((uint64_t)1 << PP_T_BLOB))
		pp_put_bytes(e, PP_T_BLOB, m->data, m->ndata);
}

static int same_str(const char *a, const char *b)
{
	return (a == NULL && b == NULL) || (a != NULL && b != NULL && strcmp(a, b) == 0);
}

static struct pp_msg m1, m2;
static long parsed;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n)
{
	uint8_t *copy = malloc(n ? n : 1);
	const char *why;
	uint32_t len;
	if (copy == NULL)
		abort();
	memcpy(copy, data, n);
	pp_header(copy, n, &len);
	if (pp_parse(copy, n, &m1, &why) == PP_OK) {
		struct pp_enc e;
		parsed++;
		reencode(&m1, &e);
		size_t k = pp_end(&e);
		if (k == 0 || pp_parse(again, k, &m2, &why) != PP_OK)
			abort();
		if (m1.type != m2.type || m1.seen != m2.seen || m1.nargv != m2.nargv || m1.nenv != m2.nenv || m1.njoin != m2.njoin ||
		    m1.ndata != m2.ndata || (m1.ndata && memcmp(m1.data, m2.data, m1.ndata) != 0) ||
		    !same_str(m1.id, m2.id) || !same_str(m1.dir, m2.dir) || !same_str(m1.msg, m2.msg) || !same_str(m1.uidmap, m2.uidmap) ||
		    m1.flags != m2.flags || m1.signal != m2.signal || m1.exit != m2.exit || m1.finished != m2.finished)
			abort();
		for (unsigned i = 0; i < m1.nargv; i++)
			if (strcmp(m1.argv[i], m2.argv[i]) != 0)
				abort();
		for (unsigned i = 0; i < m1.njoin; i++)
			if (strcmp(m1.join[i], m2.join[i]) != 0)
				abort();
	}
	free(copy);
	return 0;
}

#ifdef RANDOM_DRIVER
static uint64_t rng;

static uint32_t next(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return (uint32_t)rng;
}

int main(int argc, char **argv)
{
	long iters = argc > 1 ? atol(argv[1]) : 200000;
	rng = argc > 2 ? strtoull(argv[2], NULL, 10) : 0x9e3779b97f4a7c15ull;
	if (rng == 0)
		rng = 1;
	static uint8_t seeds[6][512];
	size_t nseed[6];
	struct pp_enc e;
	pp_begin(&e, seeds[0], 512, PP_RUN);
	pp_put_str(&e, PP_T_ID, "ctr");
	pp_put_str(&e, PP_T_DIR, "/run/c");
	pp_put_str(&e, PP_T_ARG, "/bin/sh");
	pp_put_str(&e, PP_T_ARG, "-c");
	pp_put_str(&e, PP_T_ENV, "A=1");
	pp_put_str(&e, PP_T_JOIN, "/sys/fs/cgroup/pod");
	pp_put_u32(&e, PP_T_FLAGS, 3);
	nseed[0] = pp_end(&e);
	pp_begin(&e, seeds[1], 512, PP_SIGNAL);
	pp_put_str(&e, PP_T_ID, "c");
	pp_put_u32(&e, PP_T_SIGNAL, 9);
	nseed[1] = pp_end(&e);
	pp_begin(&e, seeds[2], 512, PP_WAIT | PP_RESPONSE);
	pp_put_u32(&e, PP_T_CODE, 0);
	pp_put_u32(&e, PP_T_STATE, PP_S_EXITED);
	pp_put_u64(&e, PP_T_FINISHED, 1);
	pp_put_str(&e, PP_T_MSG, "m");
	nseed[2] = pp_end(&e);
	pp_begin(&e, seeds[3], 512, PP_F_STDOUT);
	pp_put_raw(&e, "hello\n", 6);
	nseed[3] = pp_end(&e);
	pp_begin(&e, seeds[4], 512, PP_UPDATE);
	pp_put_str(&e, PP_T_ID, "c");
	pp_put_bytes(&e, PP_T_BLOB, "{}", 2);
	nseed[4] = pp_end(&e);
	pp_begin(&e, seeds[5], 512, PP_PING);
	nseed[5] = pp_end(&e);
	static uint8_t in[1024];
	for (long it = 0; it < iters; it++) {
		int s = (int)(next() % 6);
		size_t n = nseed[s];
		memcpy(in, seeds[s], n);
		int muts = 1 + (int)(next() % 4);
		for (int k = 0; k < muts; k++) {
			uint32_t r = next();
			size_t at = n ? next() % n : 0;
			switch (r % 6) {
			case 0: in[at] ^= (uint8_t)(1u << (r >> 8) % 8); break;
			case 1: in[at] = (uint8_t)(r >> 8); break;
			case 2: n = at; break; /* truncate */
			case 3:                /* insert a byte */
				if (n < sizeof in) {
					memmove(in + at + 1, in + at, n - at);
					in[at] = (uint8_t)(r >> 8);
					n++;
				}
				break;
			case 4: /* make the header's length agree, so the fields are reached */
				if (n >= PP_HDR) {
					uint32_t l = (uint32_t)(n - PP_HDR);
					in[4] = (uint8_t)l, in[5] = (uint8_t)(l >> 8), in[6] = 0, in[7] = 0;
				}
				break;
			case 5: in[at] = (uint8_t)(r >> 8) % 64; break; /* a plausible tag */
			}
		}
		if (n >= PP_HDR && next() % 2) {
			uint32_t l = (uint32_t)(n - PP_HDR);
			in[4] = (uint8_t)l, in[5] = (uint8_t)(l >> 8), in[6] = 0, in[7] = 0;
		}
		LLVMFuzzerTestOneInput(in, n);
	}
	printf("fuzz: %ld inputs ok, %ld of them valid frames\n", iters, parsed);
	return 0;
}
#endif
