package container

import (
	"os"
	"path/filepath"
	"testing"
)

func TestRestrictContainerDir(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root (chown)")
	}
	for _, tc := range []struct {
		name string
		mode os.FileMode
		gid  int
		want os.FileMode
	}{
		{"older berth's dir", 0o755, 0, 0o700},
		{"already root's", 0o700, 0, 0o700},
		{"user namespace, older berth", 0o755, 100000, 0o710},
		{"user namespace", 0o710, 100000, 0o710},
		{"world-writable", 0o777, 0, 0o700},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "ctr")
			if err := os.Mkdir(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.Chown(dir, 0, tc.gid); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(dir, tc.mode); err != nil {
				t.Fatal(err)
			}
			if err := restrictContainerDir(dir); err != nil {
				t.Fatal(err)
			}
			st, err := os.Stat(dir)
			if err != nil {
				t.Fatal(err)
			}
			if got := st.Mode().Perm(); got != tc.want {
				t.Errorf("mode %o, want %o", got, tc.want)
			}
		})
	}
	if err := restrictContainerDir(filepath.Join(t.TempDir(), "gone")); err == nil {
		t.Error("a missing dir: no error")
	}
}
