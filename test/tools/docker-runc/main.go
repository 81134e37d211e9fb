// Command docker-runc is the OCI runtime hack/dockerd registers as Docker's
// default: it drops from a container's capabilities those the calling
// process's bounding set lacks, then execs runc with the same arguments.
//
// Docker gives a privileged container every capability the kernel knows. On
// a host whose root lacks one in its bounding set (this test VM has no
// CAP_SYS_RESOURCE), runc cannot grant it and `docker run --privileged`
// fails with "unable to apply caps: operation not permitted"; kind runs
// every node that way. Asking for no more than the host has is what a
// privileged container gets on such a host anyway.
//
// It rewrites <bundle>/config.json (create, run) and the --process file
// (exec) in place; every other call goes to runc untouched.
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// capNames are the capabilities by number, as linux/capability.h numbers them.
var capNames = []string{
	"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_DAC_READ_SEARCH", "CAP_FOWNER", "CAP_FSETID",
	"CAP_KILL", "CAP_SETGID", "CAP_SETUID", "CAP_SETPCAP", "CAP_LINUX_IMMUTABLE",
	"CAP_NET_BIND_SERVICE", "CAP_NET_BROADCAST", "CAP_NET_ADMIN", "CAP_NET_RAW", "CAP_IPC_LOCK",
	"CAP_IPC_OWNER", "CAP_SYS_MODULE", "CAP_SYS_RAWIO", "CAP_SYS_CHROOT", "CAP_SYS_PTRACE",
	"CAP_SYS_PACCT", "CAP_SYS_ADMIN", "CAP_SYS_BOOT", "CAP_SYS_NICE", "CAP_SYS_RESOURCE",
	"CAP_SYS_TIME", "CAP_SYS_TTY_CONFIG", "CAP_MKNOD", "CAP_LEASE", "CAP_AUDIT_WRITE",
	"CAP_AUDIT_CONTROL", "CAP_SETFCAP", "CAP_MAC_OVERRIDE", "CAP_MAC_ADMIN", "CAP_SYSLOG",
	"CAP_WAKE_ALARM", "CAP_BLOCK_SUSPEND", "CAP_AUDIT_READ", "CAP_PERFMON", "CAP_BPF",
	"CAP_CHECKPOINT_RESTORE",
}

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintf(os.Stderr, "docker-runc: %v\n", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	missing, err := missingCaps()
	if err != nil {
		return err
	}
	if len(missing) > 0 {
		for _, f := range specFiles(args) {
			if err := dropCaps(f.path, f.process, missing); err != nil {
				return err
			}
		}
	}
	runc, err := exec.LookPath("runc")
	if err != nil {
		return fmt.Errorf("find runc: %w", err)
	}
	return syscall.Exec(runc, append([]string{"runc"}, args...), os.Environ())
}

// missingCaps returns the names of the known capabilities that are not in
// this process's bounding set.
func missingCaps() (map[string]bool, error) {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return nil, fmt.Errorf("read capability bounding set: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		hex, ok := strings.CutPrefix(sc.Text(), "CapBnd:")
		if !ok {
			continue
		}
		bnd, err := strconv.ParseUint(strings.TrimSpace(hex), 16, 64)
		if err != nil {
			return nil, fmt.Errorf("parse CapBnd %q: %w", hex, err)
		}
		missing := map[string]bool{}
		for i, name := range capNames {
			if bnd&(1<<i) == 0 {
				missing[name] = true
			}
		}
		return missing, nil
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read /proc/self/status: %w", err)
	}
	return nil, fmt.Errorf("no CapBnd line in /proc/self/status")
}

// globalValueFlags are runc's global flags that take a value.
var globalValueFlags = map[string]bool{"--root": true, "--log": true, "--log-format": true, "--criu": true, "--rootless": true}

type specFile struct {
	path    string
	process bool // a bare process spec (exec --process), not a whole config.json
}

// specFiles finds the files runc will read capabilities from: the bundle's
// config.json of create and run, and the process file of exec.
func specFiles(args []string) []specFile {
	var files []specFile
	var command string
	for i := 0; i < len(args); i++ {
		a := args[i]
		value := func(flag string) (string, bool) {
			if v, ok := strings.CutPrefix(a, flag+"="); ok {
				return v, true
			}
			if a == flag && i+1 < len(args) {
				i++
				return args[i], true
			}
			return "", false
		}
		if command == "" {
			// runc's global flags come first; those with a value take
			// the next argument unless written flag=value.
			if globalValueFlags[a] {
				i++
			} else if !strings.HasPrefix(a, "-") {
				command = a
			}
			continue
		}
		switch command {
		case "create", "run":
			if v, ok := value("--bundle"); ok {
				files = append(files, specFile{path: filepath.Join(v, "config.json")})
			} else if v, ok := value("-b"); ok {
				files = append(files, specFile{path: filepath.Join(v, "config.json")})
			}
		case "exec":
			if v, ok := value("--process"); ok {
				files = append(files, specFile{path: v, process: true})
			} else if v, ok := value("-p"); ok {
				files = append(files, specFile{path: v, process: true})
			}
		}
	}
	// create and run without --bundle use the current directory.
	if (command == "create" || command == "run") && len(files) == 0 {
		files = append(files, specFile{path: "config.json"})
	}
	return files
}

// dropCaps removes the missing capabilities from every set of the process
// in path, keeping every other field as it was.
func dropCaps(path string, process bool, missing map[string]bool) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("read spec: %w", err)
	}
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(data, &doc); err != nil {
		return fmt.Errorf("parse %s: %w", path, err)
	}
	proc := doc
	if !process {
		proc = nil
		raw, ok := doc["process"]
		if !ok {
			return nil
		}
		if err := json.Unmarshal(raw, &proc); err != nil {
			return fmt.Errorf("parse %s process: %w", path, err)
		}
	}
	raw, ok := proc["capabilities"]
	if !ok {
		return nil
	}
	var sets map[string][]string
	if err := json.Unmarshal(raw, &sets); err != nil {
		return fmt.Errorf("parse %s capabilities: %w", path, err)
	}
	changed := false
	for name, caps := range sets {
		kept := caps[:0:0]
		for _, c := range caps {
			if missing[c] {
				changed = true
				continue
			}
			kept = append(kept, c)
		}
		sets[name] = kept
	}
	if !changed {
		return nil
	}
	if proc["capabilities"], err = json.Marshal(sets); err != nil {
		return err
	}
	if !process {
		if doc["process"], err = json.Marshal(proc); err != nil {
			return err
		}
	}
	out, err := json.Marshal(doc)
	if err != nil {
		return err
	}
	info, err := os.Stat(path)
	if err != nil {
		return err
	}
	tmp := path + ".docker-runc"
	if err := os.WriteFile(tmp, out, info.Mode().Perm()); err != nil {
		return fmt.Errorf("write spec: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("replace spec: %w", err)
	}
	return nil
}
