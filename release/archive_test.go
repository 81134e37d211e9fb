package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"io"
	"testing"
	"time"
)

func TestTargz(t *testing.T) {
	epoch := time.Unix(1765000000, 0)
	es := []entry{{"berth", 0o755, []byte("bin")}, {"config.toml", 0o644, []byte("cfg")}}
	first, err := targz("berth-1.0.0-linux-amd64", es, epoch)
	if err != nil {
		t.Fatal(err)
	}
	second, err := targz("berth-1.0.0-linux-amd64", es, epoch)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(first, second) {
		t.Error("two tarballs of the same entries differ")
	}
	gz, err := gzip.NewReader(bytes.NewReader(first))
	if err != nil {
		t.Fatal(err)
	}
	if gz.Name != "" || !gz.ModTime.IsZero() {
		t.Errorf("gzip header names %q, time %v", gz.Name, gz.ModTime)
	}
	tr := tar.NewReader(gz)
	want := []struct {
		name string
		mode int64
		data string
	}{
		{"berth-1.0.0-linux-amd64/", 0o755, ""},
		{"berth-1.0.0-linux-amd64/berth", 0o755, "bin"},
		{"berth-1.0.0-linux-amd64/config.toml", 0o644, "cfg"},
	}
	for _, w := range want {
		h, err := tr.Next()
		if err != nil {
			t.Fatalf("want %s: %v", w.name, err)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		if h.Name != w.name || h.Mode != w.mode || string(data) != w.data {
			t.Errorf("entry %s %o %q, want %s %o %q", h.Name, h.Mode, data, w.name, w.mode, w.data)
		}
		if h.Uid != 0 || h.Gid != 0 || h.Uname != "root" || h.Gname != "root" || !h.ModTime.Equal(epoch) {
			t.Errorf("%s: %d:%d %s:%s %v, want root and %v", h.Name, h.Uid, h.Gid, h.Uname, h.Gname, h.ModTime, epoch)
		}
		if len(h.PAXRecords) != 0 {
			t.Errorf("%s: PAX records %v (atime, ctime?)", h.Name, h.PAXRecords)
		}
	}
	if _, err := tr.Next(); err != io.EOF {
		t.Errorf("after the entries: %v, want the end", err)
	}
}
