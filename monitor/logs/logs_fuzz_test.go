package logs

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// FuzzStream writes fuzzed output of two streams, in fuzzed pieces, through
// the log writer and reads the file back as the kubelet does: every line
// must be a well-formed CRI record of at most MaxLine bytes of text, and
// the texts of each stream, joined (an F record ends a line), must give back
// exactly what the stream wrote: a last line without a newline ends on a
// P record, as containerd writes it.
func FuzzStream(f *testing.F) {
	f.Add([]byte("hello\nworld\n"), []byte{3, 0x80, 2}, int64(0))
	f.Add([]byte("no newline"), []byte{}, int64(1))
	f.Add([]byte("\n\n\n"), []byte{1, 1, 0x81}, int64(999999999))
	f.Add([]byte("bad utf-8 \xff\xfe\xc3\x28 \x00 tab\t cr\r\n"), []byte{5, 0x85}, int64(123456000))
	f.Add(bytes.Repeat([]byte("a"), MaxLine), []byte{}, int64(7))
	f.Add(append(bytes.Repeat([]byte("b"), MaxLine+3), '\n'), []byte{0xff, 0x10}, int64(7))
	f.Add(append(bytes.Repeat([]byte("x\n"), 100), bytes.Repeat([]byte("y"), MaxLine-1)...), []byte{0x7f, 0xff, 0x7f}, int64(5))
	// One file, emptied for each input: a directory per input would make
	// the fuzzer's minimisation of 16 KiB inputs crawl.
	p := filepath.Join(f.TempDir(), "c.log")
	f.Fuzz(func(t *testing.T, data, cuts []byte, nsec int64) {
		if err := os.Truncate(p, 0); err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		l, err := Open(p)
		if err != nil {
			t.Fatal(err)
		}
		// Any instant between 1970 and 2262: RFC 3339 has four-digit years.
		now := time.Unix(0, nsec&(1<<62-1)).UTC()
		l.now = func() time.Time { return now }
		streams := map[string]*bytes.Buffer{Stdout: {}, Stderr: {}}
		writers := map[string]interface {
			Write([]byte) (int, error)
			Close() error
		}{Stdout: l.Stream(Stdout), Stderr: l.Stream(Stderr)}
		// Each cut byte takes (c&0x7f)*97+1 bytes for stderr if its top bit
		// is set, for stdout otherwise; the rest goes to stdout.
		rest := data
		for _, c := range cuts {
			if len(rest) == 0 {
				break
			}
			n := min(int(c&0x7f)*97+1, len(rest))
			name := Stdout
			if c&0x80 != 0 {
				name = Stderr
			}
			if w, err := writers[name].Write(rest[:n]); w != n || err != nil {
				t.Fatalf("Write = %d, %v", w, err)
			}
			streams[name].Write(rest[:n])
			rest = rest[n:]
		}
		if len(rest) > 0 {
			writers[Stdout].Write(rest)
			streams[Stdout].Write(rest)
		}
		for _, w := range writers {
			w.Close()
		}
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
		if l.Dropped() != 0 {
			t.Fatalf("%d records dropped", l.Dropped())
		}
		got := map[string]*bytes.Buffer{Stdout: {}, Stderr: {}}
		last := map[string]byte{}
		out := read(t, p)
		if out != "" && !strings.HasSuffix(out, "\n") {
			t.Fatalf("log does not end with a newline")
		}
		for i, line := range strings.SplitAfter(out, "\n") {
			if line == "" {
				continue
			}
			line = strings.TrimSuffix(line, "\n")
			tsText, rest, ok1 := strings.Cut(line, " ")
			stream, rest, ok2 := strings.Cut(rest, " ")
			tag, text, ok3 := strings.Cut(rest, " ")
			if !ok1 || !ok2 || !ok3 {
				t.Fatalf("line %d malformed: %.80q", i, line)
			}
			ts, err := time.Parse(time.RFC3339Nano, tsText)
			if err != nil || !ts.Equal(now) {
				t.Fatalf("line %d: time %q: %v (want %v)", i, tsText, err, now)
			}
			if got[stream] == nil {
				t.Fatalf("line %d: stream %q", i, stream)
			}
			if tag != "P" && tag != "F" {
				t.Fatalf("line %d: tag %q", i, tag)
			}
			if len(text) > MaxLine {
				t.Fatalf("line %d: %d bytes of text, more than %d", i, len(text), MaxLine)
			}
			got[stream].WriteString(text)
			if tag == "F" {
				got[stream].WriteByte('\n')
			}
			last[stream] = tag[0]
		}
		for name, in := range streams {
			want := in.Bytes()
			if !bytes.Equal(got[name].Bytes(), want) {
				t.Fatalf("%s: texts joined differ from the input:\n got %.200q\nwant %.200q", name, got[name].Bytes(), want)
			}
			if ends := in.Len() > 0 && want[len(want)-1] == '\n'; ends != (last[name] == 'F') && in.Len() > 0 {
				t.Fatalf("%s: last record %q for a stream whose output ends with a newline: %v", name, last[name], ends)
			}
		}
	})
}
