package store

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

type pod struct {
	Name    string
	Attempt int
	Payload string
}

func TestPutGetDelete(t *testing.T) {
	for _, opts := range [][]Option{nil, {Volatile}} {
		putGetDelete(t, opts)
	}
}

func putGetDelete(t *testing.T, opts []Option) {
	r, err := Open[pod](t.TempDir(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Put("a", &pod{Name: "a", Attempt: 1}); err != nil {
		t.Fatal(err)
	}
	if err := r.Put("a", &pod{Name: "a", Attempt: 2}); err != nil {
		t.Fatal(err)
	}
	got, err := r.Get("a")
	if err != nil || got.Attempt != 2 {
		t.Fatalf("Get(a) = %+v, %v; want attempt 2", got, err)
	}
	if err := r.Delete("a"); err != nil {
		t.Fatal(err)
	}
	if err := r.Delete("a"); err != nil {
		t.Fatalf("second Delete must succeed: %v", err)
	}
	if _, err := r.Get("a"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Get after Delete = %v, want ErrNotExist", err)
	}
}

func TestInvalidIDs(t *testing.T) {
	r, err := Open[pod](t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"", "../x", "a/b", ".hidden", "nul\x00"} {
		if err := r.Put(id, &pod{}); err == nil {
			t.Errorf("Put(%q) succeeded, want error", id)
		}
		if _, err := r.Get(id); err == nil {
			t.Errorf("Get(%q) succeeded, want error", id)
		}
	}
}

func TestLoadAll(t *testing.T) {
	tests := []struct {
		name        string
		files       map[string]string // extra files written by hand before LoadAll
		wantIDs     []string
		wantCorrupt []string
		wantGone    []string // files LoadAll must remove
	}{
		{name: "empty"},
		{
			name:    "torn temp file from a crash before rename",
			files:   map[string]string{"ok.json": `{"Name":"ok"}`, ".tmp-ok-123": `{"Name":"o`},
			wantIDs: []string{"ok"}, wantGone: []string{".tmp-ok-123"},
		},
		{
			name:        "damaged record is moved aside, others load",
			files:       map[string]string{"good.json": `{"Name":"good"}`, "bad.json": `{"Na`},
			wantIDs:     []string{"good"},
			wantCorrupt: []string{"bad"},
			wantGone:    []string{"bad.json"},
		},
		{
			name:    "unrelated files are ignored",
			files:   map[string]string{"x.json": `{}`, "notes.txt": "hi", "old.corrupt": "zz"},
			wantIDs: []string{"x"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			for name, content := range tt.files {
				if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			r, err := Open[pod](dir)
			if err != nil {
				t.Fatal(err)
			}
			got, corrupt, err := r.LoadAll()
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tt.wantIDs) {
				t.Errorf("loaded %d records, want %d (%v)", len(got), len(tt.wantIDs), tt.wantIDs)
			}
			for _, id := range tt.wantIDs {
				if got[id] == nil {
					t.Errorf("record %q not loaded", id)
				}
			}
			if len(corrupt) != len(tt.wantCorrupt) {
				t.Fatalf("corrupt = %+v, want %v", corrupt, tt.wantCorrupt)
			}
			for i, c := range corrupt {
				if c.ID != tt.wantCorrupt[i] || c.Err == nil {
					t.Errorf("corrupt[%d] = %+v, want id %q with an error", i, c, tt.wantCorrupt[i])
				}
				if _, err := os.Stat(c.Path); err != nil {
					t.Errorf("corrupt record not kept aside at %s: %v", c.Path, err)
				}
			}
			for _, name := range tt.wantGone {
				if _, err := os.Stat(filepath.Join(dir, name)); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("%s still present after LoadAll (err %v)", name, err)
				}
			}
		})
	}
}

// TestCrashDuringWrites kills a real writer process with SIGKILL while it
// rewrites records in a loop, then checks that every record still decodes
// (as its old or its new version) and that no temp file survives a load.
// Volatile records (no fsync) must give the same guarantee: a process
// crash does not lose the page cache.
func TestCrashDuringWrites(t *testing.T) {
	for _, volatile := range []string{"", "1"} {
		t.Run("volatile="+volatile, func(t *testing.T) { crashDuringWrites(t, volatile) })
	}
}

func crashDuringWrites(t *testing.T, volatile string) {
	if os.Getenv("BERTH_STORE_WRITER_DIR") != "" {
		t.Skip("writer child")
	}
	dir := t.TempDir()
	const ids = 8
	for round := 0; round < 5; round++ {
		cmd := exec.Command(os.Args[0], "-test.run=^TestWriterChild$")
		cmd.Env = append(os.Environ(), "BERTH_STORE_WRITER_DIR="+dir, "BERTH_STORE_WRITER_VOLATILE="+volatile)
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// Wait for the child to say it has started writing, then let it run
		// a little so the kill lands at an arbitrary point of a write.
		buf := make([]byte, 6)
		if _, err := out.Read(buf); err != nil {
			t.Fatalf("writer did not start: %v", err)
		}
		time.Sleep(time.Duration(5+round*7) * time.Millisecond)
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		_ = cmd.Wait()

		r, err := Open[pod](dir)
		if err != nil {
			t.Fatal(err)
		}
		got, corrupt, err := r.LoadAll()
		if err != nil {
			t.Fatal(err)
		}
		if len(corrupt) != 0 {
			t.Fatalf("round %d: a SIGKILL left corrupt records: %+v", round, corrupt)
		}
		if len(got) != ids {
			t.Fatalf("round %d: loaded %d records, want %d", round, len(got), ids)
		}
		for id, p := range got {
			if p.Name != id || len(p.Payload) != 64<<10 {
				t.Fatalf("round %d: record %s is not a whole write: name %q, payload %d bytes", round, id, p.Name, len(p.Payload))
			}
		}
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), tempPrefix) {
				t.Fatalf("round %d: temp file %s survived LoadAll", round, e.Name())
			}
		}
	}
}

// TestWriterChild is the process TestCrashDuringWrites kills.
func TestWriterChild(t *testing.T) {
	dir := os.Getenv("BERTH_STORE_WRITER_DIR")
	if dir == "" {
		t.Skip("only runs as the child of TestCrashDuringWrites")
	}
	var opts []Option
	if os.Getenv("BERTH_STORE_WRITER_VOLATILE") != "" {
		opts = append(opts, Volatile)
	}
	r, err := Open[pod](dir, opts...)
	if err != nil {
		t.Fatal(err)
	}
	payload := strings.Repeat("x", 64<<10)
	for i := 0; i < 8; i++ {
		id := "pod" + strconv.Itoa(i)
		if err := r.Put(id, &pod{Name: id, Payload: payload}); err != nil {
			t.Fatal(err)
		}
	}
	os.Stdout.WriteString("ready\n")
	for n := 0; ; n++ {
		id := "pod" + strconv.Itoa(n%8)
		if err := r.Put(id, &pod{Name: id, Attempt: n, Payload: payload}); err != nil {
			t.Fatal(err)
		}
	}
}

func TestFormatVersions(t *testing.T) {
	// v2 renamed Name to Title.
	toV2 := func(data []byte) ([]byte, error) {
		return []byte(strings.Replace(strings.Replace(string(data), `"Name"`, `"Title"`, 1), `"formatVersion":1`, `"formatVersion":2`, 1)), nil
	}
	type podV2 struct {
		Title   string
		Attempt int
	}
	tests := []struct {
		name     string
		version  int
		steps    map[int]Migration
		file     string
		want     *podV2 // nil: not loaded
		kept     string // the VersionError, for a record left alone
		rewrites bool   // the file is written back in the current version
	}{
		{name: "unversioned is version 1", version: 1, file: `{"Name":"a","Attempt":3}`, want: &podV2{Attempt: 3}},
		{name: "current", version: 1, file: `{"formatVersion":1,"Attempt":4}`, want: &podV2{Attempt: 4}},
		{name: "newer", version: 1, file: `{"formatVersion":7,"Attempt":4}`,
			kept: "has format version 7, newer than version 1, the newest this berth reads"},
		{name: "older without a migration", version: 2, file: `{"formatVersion":1,"Name":"a"}`,
			kept: "has format version 1, and this berth cannot migrate it to version 2"},
		{name: "version 0", version: 1, file: `{"formatVersion":0,"Name":"a"}`,
			kept: "has format version 0, and this berth cannot migrate it to version 1"},
		{name: "migrated", version: 2, steps: map[int]Migration{1: toV2}, file: `{"formatVersion":1,"Name":"a","Attempt":2}`,
			want: &podV2{Title: "a", Attempt: 2}, rewrites: true},
		{name: "unversioned migrated", version: 2, steps: map[int]Migration{1: func(b []byte) ([]byte, error) {
			return []byte(strings.Replace(string(b), `"Name"`, `"Title"`, 1)), nil
		}}, file: `{"Name":"b"}`, want: &podV2{Title: "b"}, rewrites: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "x.json")
			if err := os.WriteFile(path, []byte(tt.file), 0o600); err != nil {
				t.Fatal(err)
			}
			r, err := Open[podV2](dir, Version(tt.version, tt.steps))
			if err != nil {
				t.Fatal(err)
			}
			got, corrupt, err := r.LoadAll()
			if err != nil {
				t.Fatal(err)
			}
			after, _ := os.ReadFile(path)
			if tt.kept != "" {
				var ve *VersionError
				if len(corrupt) != 1 || !corrupt[0].Kept || !errors.As(corrupt[0].Err, &ve) || !strings.Contains(ve.Error(), tt.kept) || !strings.Contains(ve.Error(), path) {
					t.Fatalf("corrupt = %+v, want one kept record whose error names %s and says %q", corrupt, path, tt.kept)
				}
				if len(got) != 0 || string(after) != tt.file {
					t.Errorf("loaded %v, file now %q: want nothing loaded and the file untouched", got, after)
				}
				if _, err := r.Get("x"); !errors.As(err, &ve) {
					t.Errorf("Get = %v, want the VersionError", err)
				}
				return
			}
			if len(corrupt) != 0 || got["x"] == nil || *got["x"] != *tt.want {
				t.Fatalf("LoadAll = %v, %+v; want %+v", got, corrupt, tt.want)
			}
			if rewritten := string(after) != tt.file; rewritten != tt.rewrites {
				t.Errorf("file now %q (rewritten %t, want %t)", after, rewritten, tt.rewrites)
			}
			if tt.rewrites && !strings.HasPrefix(string(after), fmt.Sprintf(`{"formatVersion":%d,`, tt.version)) {
				t.Errorf("migrated record written back as %q", after)
			}
		})
	}
}

func TestPutWritesVersion(t *testing.T) {
	dir := t.TempDir()
	r, err := Open[pod](dir, Version(3, nil))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Put("a", &pod{Name: "a"}); err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(filepath.Join(dir, "a.json"))
	if want := `{"formatVersion":3,"Name":"a","Attempt":0,"Payload":""}`; string(data) != want {
		t.Errorf("record is %s, want %s", data, want)
	}
	type empty struct{}
	e, _ := Open[empty](dir)
	if err := e.Put("b", &empty{}); err != nil {
		t.Fatal(err)
	}
	if data, _ := os.ReadFile(filepath.Join(dir, "b.json")); string(data) != `{"formatVersion":1}` {
		t.Errorf("empty record is %s", data)
	}
}
