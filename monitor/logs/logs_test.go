package logs

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var fixed = time.Date(2024, 1, 2, 3, 4, 5, 6000, time.UTC)

const ts = "2024-01-02T03:04:05.000006Z"

func open(t *testing.T) (*File, string) {
	t.Helper()
	p := filepath.Join(t.TempDir(), "c.log")
	l, err := Open(p)
	if err != nil {
		t.Fatal(err)
	}
	l.now = func() time.Time { return fixed }
	return l, p
}

func read(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestStream(t *testing.T) {
	long := strings.Repeat("a", MaxLine)
	for _, tc := range []struct {
		name   string
		writes []string
		want   string
	}{
		{"one line", []string{"hello\n"}, ts + " stdout F hello\n"},
		{"two lines in one write", []string{"a\nb\n"}, ts + " stdout F a\n" + ts + " stdout F b\n"},
		{"line across writes", []string{"he", "llo\nwor", "ld\n"}, ts + " stdout F hello\n" + ts + " stdout F world\n"},
		{"empty line", []string{"\n"}, ts + " stdout F \n"},
		{"no trailing newline flushed on close as partial", []string{"tail"}, ts + " stdout P tail\n"},
		{"line ending exactly on a partial record", []string{long}, ts + " stdout P " + long + "\n"},
		{"exactly max", []string{long + "\n"}, ts + " stdout F " + long + "\n"},
		{"max plus one", []string{long + "b\n"}, ts + " stdout P " + long + "\n" + ts + " stdout F b\n"},
		{"long line in pieces", []string{long[:100], long[100:] + "xy", "z\n"}, ts + " stdout P " + long + "\n" + ts + " stdout F xyz\n"},
		{"two max parts and rest", []string{long + long + "c"}, ts + " stdout P " + long + "\n" + ts + " stdout P " + long + "\n" + ts + " stdout P c\n"},
		{"invalid utf8 kept as is", []string{"\xff\xfe ok\n"}, ts + " stdout F \xff\xfe ok\n"},
		{"carriage return kept", []string{"a\r\n"}, ts + " stdout F a\r\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, p := open(t)
			w := l.Stream(Stdout)
			for _, s := range tc.writes {
				if n, err := w.Write([]byte(s)); n != len(s) || err != nil {
					t.Fatalf("write: %d %v", n, err)
				}
			}
			w.Close()
			l.Close()
			if got := read(t, p); got != tc.want {
				t.Fatalf("got\n%q\nwant\n%q", got, tc.want)
			}
		})
	}
}

func TestCopyBothStreams(t *testing.T) {
	l, p := open(t)
	if err := l.Copy(Stdout, strings.NewReader("out\n")); err != nil {
		t.Fatal(err)
	}
	if err := l.Copy(Stderr, strings.NewReader("err")); err != nil {
		t.Fatal(err)
	}
	l.Close()
	want := ts + " stdout F out\n" + ts + " stderr P err\n"
	if got := read(t, p); got != want {
		t.Fatalf("got %q want %q", got, want)
	}
}

func TestReopenLosesNothing(t *testing.T) {
	l, p := open(t)
	r, w := io.Pipe()
	done := make(chan error)
	go func() { done <- l.Copy(Stdout, r) }()
	var want []string
	for i := 0; i < 200; i++ {
		line := strings.Repeat("x", i)
		want = append(want, line)
		if _, err := w.Write([]byte(line + "\n")); err != nil {
			t.Fatal(err)
		}
		if i == 100 {
			if err := os.Rename(p, p+".1"); err != nil {
				t.Fatal(err)
			}
			if err := l.Reopen(); err != nil {
				t.Fatal(err)
			}
		}
	}
	w.Close()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	l.Close()
	all := read(t, p+".1") + read(t, p)
	var got []string
	for _, rec := range strings.Split(strings.TrimSuffix(all, "\n"), "\n") {
		parts := strings.SplitN(rec, " ", 4)
		if len(parts) != 4 || parts[1] != Stdout || parts[2] != "F" {
			t.Fatalf("bad record %q", rec)
		}
		got = append(got, parts[3])
	}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("lines lost or reordered: %d records, want %d", len(got), len(want))
	}
	if !strings.HasPrefix(read(t, p), ts) || bytes.Count([]byte(read(t, p+".1")), []byte("\n")) < 100 {
		t.Fatal("reopen did not switch files")
	}
}

func TestWriteAfterCloseIsDropped(t *testing.T) {
	l, _ := open(t)
	w := l.Stream(Stderr)
	l.Close()
	if _, err := w.Write([]byte("late\n")); err != nil {
		t.Fatal(err)
	}
	if l.Dropped() != 1 {
		t.Fatalf("dropped %d", l.Dropped())
	}
}

func TestRealTimestamp(t *testing.T) {
	p := filepath.Join(t.TempDir(), "c.log")
	l, err := Open(p)
	if err != nil {
		t.Fatal(err)
	}
	w := l.Stream(Stdout)
	w.Write([]byte("x\n"))
	l.Close()
	rec := read(t, p)
	stamp, _, _ := strings.Cut(rec, " ")
	if _, err := time.Parse(time.RFC3339Nano, stamp); err != nil {
		t.Fatalf("timestamp %q: %v", stamp, err)
	}
}
