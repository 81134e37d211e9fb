// Package logs writes container output in the CRI log format the kubelet
// reads:
//
//	<RFC3339Nano time> <stdout|stderr> <P|F> <text>\n
//
// A line longer than MaxLine is cut into P (partial) records followed by a
// final F record, as containerd does, so that one runaway line cannot make
// the reader buffer without bound.
package logs

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"
)

// MaxLine is the longest text one record carries.
const MaxLine = 16 * 1024

// Stream names as they appear in the log.
const (
	Stdout = "stdout"
	Stderr = "stderr"
)

// File is one container's log file, shared by its streams. Every record is
// written with a single write(2), so records of two streams never
// interleave.
type File struct {
	mu   sync.Mutex
	path string
	f    *os.File
	now  func() time.Time
	// dropped counts records lost to write errors: a full disk must not
	// block the container, so they are dropped, not retried.
	dropped int
}

// Open opens (creating if needed) the log file at path, appending.
func Open(path string) (*File, error) {
	f, err := openLog(path)
	if err != nil {
		return nil, err
	}
	return &File{path: path, f: f, now: time.Now}, nil
}

func openLog(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o640)
	if err != nil {
		return nil, fmt.Errorf("open log %s: %w", path, err)
	}
	return f, nil
}

// Path is where the log is written.
func (l *File) Path() string { return l.path }

// Reopen starts a new file at the path, after the kubelet renamed the old
// one away. Records go to the old file until the new one is open, so none
// is lost.
func (l *File) Reopen() error {
	f, err := openLog(l.path)
	if err != nil {
		return err
	}
	l.mu.Lock()
	old := l.f
	l.f = f
	l.mu.Unlock()
	return old.Close()
}

// Close closes the file. Streams must be closed first.
func (l *File) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		return nil
	}
	err := l.f.Close()
	l.f = nil
	return err
}

// Dropped is how many writes failed.
func (l *File) Dropped() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.dropped
}

func (l *File) write(b []byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		l.dropped++
		return
	}
	if _, err := l.f.Write(b); err != nil {
		l.dropped++
	}
}

// Stream returns a writer that turns bytes written by one stream into
// records. Close flushes a trailing line that has no newline (as a P record).
func (l *File) Stream(name string) io.WriteCloser {
	return &lineWriter{log: l, stream: name}
}

// Copy drains r into the stream until EOF or an error, then flushes. It
// keeps reading whatever happens to the file, so the writer never blocks on
// a full pipe.
func (l *File) Copy(name string, r io.Reader) error {
	w := l.Stream(name)
	buf := make([]byte, 32*1024)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			_, _ = w.Write(buf[:n])
		}
		if err != nil {
			w.Close()
			if errors.Is(err, io.EOF) || errors.Is(err, os.ErrClosed) {
				return nil
			}
			return err
		}
	}
}

type lineWriter struct {
	log     *File
	stream  string
	pending []byte // text of the current line not yet written
	out     []byte
	// partial: the last record written was P, so the line is still open
	// even when pending is empty (it filled a record exactly).
	partial bool
}

func (w *lineWriter) Write(p []byte) (int, error) {
	n := len(p)
	w.out = w.out[:0]
	ts := w.log.now().UTC().Format(time.RFC3339Nano)
	for len(p) > 0 {
		i := indexNewline(p)
		if i < 0 {
			room := MaxLine - len(w.pending)
			if len(p) < room {
				w.pending = append(w.pending, p...)
				break
			}
			w.pending = append(w.pending, p[:room]...)
			p = p[room:]
			w.record(ts, 'P')
			continue
		}
		line := p[:i]
		p = p[i+1:]
		for len(w.pending)+len(line) > MaxLine {
			room := MaxLine - len(w.pending)
			w.pending = append(w.pending, line[:room]...)
			line = line[room:]
			w.record(ts, 'P')
		}
		w.pending = append(w.pending, line...)
		w.record(ts, 'F')
	}
	if len(w.out) > 0 {
		w.log.write(w.out)
	}
	// A burst of output must not leave its buffers to an idle stream.
	if cap(w.out) > 4<<10 {
		w.out = nil
	}
	if len(w.pending) == 0 && cap(w.pending) > 4<<10 {
		w.pending = nil
	}
	return n, nil
}

func indexNewline(p []byte) int {
	for i, c := range p {
		if c == '\n' {
			return i
		}
	}
	return -1
}

func (w *lineWriter) record(ts string, tag byte) {
	w.out = append(w.out, ts...)
	w.out = append(w.out, ' ')
	w.out = append(w.out, w.stream...)
	w.out = append(w.out, ' ', tag, ' ')
	w.out = append(w.out, w.pending...)
	w.out = append(w.out, '\n')
	w.pending = w.pending[:0]
	w.partial = tag == 'P'
}

// Close writes a last line that had no newline as a partial record, as
// containerd does: the kubelet adds a newline to the text of F records
// only, so a termination message read from the log (FallbackToLogsOnError)
// is exactly what the container wrote, "DONE" and not "DONE\n". A line
// that ended exactly on a P record needs nothing more.
func (w *lineWriter) Close() error {
	if len(w.pending) == 0 {
		return nil
	}
	w.out = w.out[:0]
	w.record(w.log.now().UTC().Format(time.RFC3339Nano), 'P')
	w.log.write(w.out)
	return nil
}
