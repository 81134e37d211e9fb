/*
 * The CRI log writer: a container's stdout and stderr as records
 *
 *   <RFC3339Nano UTC time> <stdout|stderr> <P|F> <text>\n
 *
 * in one file at the path the kubelet asked for, reopened on request after
 * the kubelet rotated it. Nothing is held between reads: the text after a
 * chunk's last newline is written at once as a P (partial) record, and the
 * kubelet joins P records to the next F. So an idle stream costs no
 * memory, and no text waits in the pod process for a newline that may
 * never come.
 */
#ifndef PODPROC_LOGW_H
#define PODPROC_LOGW_H

#include <stddef.h>
#include <time.h>

/* The longest text one record carries; a longer line is cut into P records. */
#define LOGW_MAX_LINE 8192

struct logw {
	int fd;     /* -1: output is discarded */
	char *path; /* malloc'd */
	unsigned long dropped; /* writes that failed: never retried, never blocking */
};

/* logw_open opens path for appending (creating it 0640); NULL path discards. */
int logw_open(struct logw *l, const char *path);
/* logw_reopen opens a new file at the path; the old one is closed once it is. */
int logw_reopen(struct logw *l);
void logw_close(struct logw *l);

/*
 * logw_chunk writes the records for n bytes a stream produced at ts
 * (stream 1: stdout, 2: stderr), in as few write(2)s as fit the buffer,
 * never splitting a record.
 */
void logw_chunk(struct logw *l, int stream, const char *data, size_t n, const struct timespec *ts);

/* logw_time formats ts as Go's RFC3339Nano in UTC (trailing zeros of the
 * fraction dropped) into out (at least 36 bytes); returns its length. */
size_t logw_time(char *out, const struct timespec *ts);

#endif
