package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// qemu is Debian's qemu-user-static for arm64.
const qemu = "qemu-aarch64-static"

// smoke runs the arm64 binaries under qemu-user. The C pod process cannot
// serve there (qemu-user refuses PR_SET_CHILD_SUBREAPER), so it is checked
// by its usage exit and by its C unit tests, cross-built and run.
func (r *release) smoke(bin string) error {
	run := func(want int, args ...string) (string, error) {
		var out bytes.Buffer
		cmd := exec.Command(qemu, args...)
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		code := 0
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			code = exit.ExitCode()
		} else if err != nil {
			return "", err
		}
		if code != want {
			return "", fmt.Errorf("%s: exit %d, want %d:\n%s", strings.Join(args, " "), code, want, out.String())
		}
		fmt.Printf("arm64 smoke: %s: exit %d\n%s", strings.Join(args, " "), code, indent(out.String()))
		return out.String(), nil
	}
	out, err := run(0, filepath.Join(bin, "berth"), "--version")
	if err != nil {
		return err
	}
	if !strings.Contains(out, "linux/arm64") || !strings.Contains(out, r.commit) {
		return fmt.Errorf("berth --version under qemu: %q", out)
	}
	if _, err := run(0, filepath.Join(bin, "berth"), "config", "default"); err != nil {
		return err
	}
	if out, err = run(2, filepath.Join(bin, "berth-podproc")); err != nil {
		return err
	}
	if !strings.Contains(out, "usage") {
		return fmt.Errorf("berth-podproc without arguments says %q, no usage", out)
	}
	tmp, err := os.MkdirTemp("", "mkrelease-unit-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	// unit.c without the Makefile's sanitizers: their runtimes are not
	// cross-installed.
	src := filepath.Join(r.root, "monitor/podproc/csrc")
	cc := exec.Command(crossCC["arm64"], "-std=gnu11", "-Wall", "-Wextra", "-Werror", "-O1", "-static",
		"-o", filepath.Join(tmp, "unit"), "unit.c", "proto.c", "logw.c")
	cc.Dir = src
	if out, err := cc.CombinedOutput(); err != nil {
		return fmt.Errorf("cross-build unit.c: %w\n%s", err, out)
	}
	work := filepath.Join(tmp, "work")
	if err := os.Mkdir(work, 0o755); err != nil {
		return err
	}
	_, err = run(0, filepath.Join(tmp, "unit"), work)
	return err
}

func indent(s string) string {
	if s == "" {
		return ""
	}
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > 6 {
		lines = append(lines[:6], fmt.Sprintf("... (%d lines)", len(lines)))
	}
	return "  " + strings.Join(lines, "\n  ") + "\n"
}
