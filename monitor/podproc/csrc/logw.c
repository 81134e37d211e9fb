/* The CRI log writer (logw.h). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "logw.h"

/* One record at most: time, stream, tag, LOGW_MAX_LINE of text, newline. */
#define OUT_CAP (LOGW_MAX_LINE + 4096)
static char out[OUT_CAP];
static size_t outlen;

int logw_open(struct logw *l, const char *path)
{
	*l = (struct logw){.fd = -1};
	if (path == NULL || ((l->path = strdup(path)) != NULL && logw_reopen(l) == 0))
		return 0;
	int e = errno;
	free(l->path);
	l->path = NULL;
	errno = e;
	return -1;
}

int logw_reopen(struct logw *l)
{
	if (l->path == NULL)
		return 0;
	int fd = open(l->path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOCTTY, 0640);
	if (fd < 0)
		return -1;
	/* Records went to the old file until this moment: none is lost. */
	if (l->fd >= 0)
		close(l->fd);
	l->fd = fd;
	return 0;
}

void logw_close(struct logw *l)
{
	if (l->fd >= 0)
		close(l->fd);
	free(l->path);
	l->fd = -1;
	l->path = NULL;
}

static void flush(struct logw *l)
{
	size_t off = 0;
	while (off < outlen) {
		ssize_t w = write(l->fd, out + off, outlen - off);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			/* A full disk must not block the container: dropped. */
			l->dropped++;
			break;
		}
		off += (size_t)w;
	}
	outlen = 0;
}

static char *digits(char *p, unsigned long v, int width)
{
	for (int i = width - 1; i >= 0; i--, v /= 10)
		p[i] = (char)('0' + v % 10);
	return p + width;
}

size_t logw_time(char *buf, const struct timespec *ts)
{
	long long secs = ts->tv_sec < 0 ? 0 : (long long)ts->tv_sec;
	long long z = secs / 86400 + 719468; /* days since 0000-03-01 */
	long sod = (long)(secs % 86400);
	long era = (long)(z / 146097);
	long doe = (long)(z - (long long)era * 146097);             /* [0, 146096] */
	long yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365; /* [0, 399] */
	long doy = doe - (365 * yoe + yoe / 4 - yoe / 100);           /* [0, 365], from March */
	long mp = (5 * doy + 2) / 153;
	long day = doy - (153 * mp + 2) / 5 + 1;
	long mon = mp < 10 ? mp + 3 : mp - 9;
	long year = yoe + era * 400 + (mon <= 2);
	char *p = buf;
	p = digits(p, (unsigned long)year, 4);
	*p++ = '-';
	p = digits(p, (unsigned long)mon, 2);
	*p++ = '-';
	p = digits(p, (unsigned long)day, 2);
	*p++ = 'T';
	p = digits(p, (unsigned long)(sod / 3600), 2);
	*p++ = ':';
	p = digits(p, (unsigned long)(sod / 60 % 60), 2);
	*p++ = ':';
	p = digits(p, (unsigned long)(sod % 60), 2);
	unsigned long ns = (unsigned long)ts->tv_nsec % 1000000000ul;
	if (ns != 0) {
		int w = 9;
		while (ns % 10 == 0) {
			ns /= 10;
			w--;
		}
		*p++ = '.';
		p = digits(p, ns, w);
	}
	*p++ = 'Z';
	return (size_t)(p - buf);
}

static void record(struct logw *l, const char *hdr, size_t nhdr, char tag, const char *text, size_t n)
{
	if (OUT_CAP - outlen < nhdr + n + 4)
		flush(l);
	memcpy(out + outlen, hdr, nhdr);
	outlen += nhdr;
	out[outlen++] = tag;
	out[outlen++] = ' ';
	memcpy(out + outlen, text, n);
	outlen += n;
	out[outlen++] = '\n';
}

void logw_chunk(struct logw *l, int stream, const char *data, size_t n, const struct timespec *ts)
{
	if (l->fd < 0 || n == 0)
		return;
	char hdr[64];
	size_t nhdr = logw_time(hdr, ts);
	const char *name = stream == 2 ? " stderr " : " stdout ";
	memcpy(hdr + nhdr, name, 8);
	nhdr += 8;
	while (n > 0) {
		const char *nl = memchr(data, '\n', n < LOGW_MAX_LINE ? n : LOGW_MAX_LINE);
		if (nl != NULL) {
			record(l, hdr, nhdr, 'F', data, (size_t)(nl - data));
			n -= (size_t)(nl - data) + 1;
			data = nl + 1;
		} else {
			size_t k = n < LOGW_MAX_LINE ? n : LOGW_MAX_LINE;
			record(l, hdr, nhdr, 'P', data, k);
			n -= k;
			data += k;
		}
	}
	flush(l);
}
