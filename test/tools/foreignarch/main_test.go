package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestRunsForeignBinary builds this program and an arm64 one, and runs the
// second through the first, and only there.
func TestRunsForeignBinary(t *testing.T) {
	if _, err := os.Stat(handlers["arm64"].emulator); err != nil {
		t.Skipf("no emulator: %v", err)
	}
	if os.Getuid() != 0 {
		t.Skip("needs root: the user namespace maps every host id")
	}
	dir := t.TempDir()
	self := filepath.Join(dir, "foreignarch")
	build(t, self, ".", "GOARCH=amd64")
	src := filepath.Join(dir, "hello")
	if err := os.MkdirAll(src, 0o755); err != nil {
		t.Fatal(err)
	}
	prog := "package main\nimport (\"fmt\"; \"os\"; \"runtime\")\n" +
		"func main() { if len(os.Args) > 1 { fmt.Println(os.Args[0]); return }; fmt.Println(runtime.GOARCH) }\n"
	if err := os.WriteFile(filepath.Join(src, "main.go"), []byte(prog), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "go.mod"), []byte("module hello\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	hello := filepath.Join(dir, "hello-arm64")
	build(t, hello, src, "GOARCH=arm64")
	if out, err := exec.Command(self, "--", "true").CombinedOutput(); err != nil &&
		strings.Contains(string(out), "Linux 6.7 or later") {
		t.Skipf("this kernel mounts no binfmt_misc in a user namespace: %s", out)
	}
	for _, tc := range []struct {
		name string
		args []string
		want string
		fail bool
	}{
		{name: "arm64 binary", args: []string{"--", hello}, want: "arm64"},
		{name: "exit status", args: []string{"--", "sh", "-c", "exit 3"}, fail: true},
		// A multi-call binary dispatches on argv[0], which the P flag keeps.
		{name: "argv0", args: []string{"--", "bash", "-c", "exec -a named " + hello + " argv0"}, want: "named"},
		{name: "unknown arch", args: []string{"-arch", "mips", "--", hello}, fail: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := exec.Command(self, tc.args...).CombinedOutput()
			if tc.fail != (err != nil) {
				t.Fatalf("err = %v, want failure %v; output %q", err, tc.fail, out)
			}
			if tc.want != "" && strings.TrimSpace(string(out)) != tc.want {
				t.Fatalf("output %q, want %q", out, tc.want)
			}
		})
	}
	// The handler lived in the namespace only: here the binary is foreign.
	if out, err := exec.Command(hello).CombinedOutput(); err == nil {
		t.Fatalf("the arm64 binary ran outside foreignarch (%q): a handler leaked into the host's binfmt_misc", out)
	}
}

func build(t *testing.T, out, dir, goarch string) {
	t.Helper()
	cmd := exec.Command("go", "build", "-o", out, ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", goarch)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s: %v\n%s", dir, err, b)
	}
}
