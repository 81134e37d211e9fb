package monitor

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestReadSpec(t *testing.T) {
	for _, tc := range []struct {
		name, file, wantErr string
	}{
		{"a spec", `{"ociVersion":"1.3.0","process":{"args":["sh"]}}`, ""},
		{"no file", "", "read spec"},
		{"not json", `{"process":`, "decode spec"},
		{"no process", `{"ociVersion":"1.3.0"}`, "spec without a process"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if tc.file != "" {
				if err := os.WriteFile(filepath.Join(dir, SpecFile), []byte(tc.file), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			s, err := ReadSpec(dir)
			if tc.wantErr == "" {
				if err != nil || s.Process.Args[0] != "sh" {
					t.Fatalf("ReadSpec = %v, %v", s, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("ReadSpec error %v, want one saying %q", err, tc.wantErr)
			}
		})
	}
}
