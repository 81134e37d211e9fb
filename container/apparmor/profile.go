// Package apparmor makes and loads berth's default AppArmor profile and
// tells whether a profile is loaded.
package apparmor

import (
	"bytes"
	"os"
	"path/filepath"
	"text/template"
)

// DefaultProfile is the profile RuntimeDefault and containers that ask
// for nothing get.
const DefaultProfile = "berth-default"

// The rules are those of the default profiles of containerd and Docker,
// which images and users expect: everything a process normally does,
// but no mounts, no writes to the kernel's knobs under /proc and /sys
// (a process's own /proc files, SysV shm limits and the cgroup tree
// excepted), and no reads of what leaks host secrets.
var profileTemplate = template.Must(template.New("profile").Parse(`{{if .ABI}}abi <abi/3.0>,
{{end}}{{if .Tunables}}#include <tunables/global>
{{else}}@{PROC}=/proc/
{{end}}
profile {{.Name}} flags=(attach_disconnected,mediate_deleted) {
{{- if .Base}}
  #include <abstractions/base>
{{- end}}

  network,
  capability,
  file,
  umount,
  deny mount,

  # berth runs unconfined; the profile's own processes signal and trace
  # each other, nobody else.
  signal (receive) peer=unconfined,
  signal (send,receive) peer={{.Name}},
  ptrace (trace,read,tracedby,readby) peer={{.Name}},

  # /proc: no writes to files directly in it, nor below a directory that
  # is neither a pid nor sys ...
  deny @{PROC}/* w,
  deny @{PROC}/{[^1-9],[^1-9][^0-9],[^1-9s][^0-9y][^0-9s],[^1-9][^0-9][^0-9][^0-9/]*}/** w,
  # ... and under sys only to kernel/shm*.
  deny @{PROC}/sys/[^k]** w,
  deny @{PROC}/sys/kernel/{?,??,[^s][^h][^m]**} w,
  deny @{PROC}/sysrq-trigger rwklx,
  deny @{PROC}/kcore rwklx,

  # /sys: no writes outside the cgroup tree (/sys/fs/cgroup).
  deny /sys/{[^f]*,f[^s]*,fs/[^c]*,fs/c[^g]*,fs/cg[^r]*}/** wklx,
  deny /sys/firmware/** rwklx,
  deny /sys/devices/virtual/powercap/** rwklx,
  deny /sys/kernel/security/** rwklx,
}
`))

type profileData struct {
	Name                string
	ABI, Tunables, Base bool
}

// Generate returns the text of the profile name, including the host's
// abi, tunables and base abstraction where etc (/etc/apparmor.d) has
// them: a host without them still gets a profile the parser takes.
func Generate(name, etc string) ([]byte, error) {
	has := func(p string) bool {
		_, err := os.Stat(filepath.Join(etc, p))
		return err == nil
	}
	d := profileData{Name: name, ABI: has("abi/3.0"), Tunables: has("tunables/global"), Base: has("abstractions/base")}
	var buf bytes.Buffer
	if err := profileTemplate.Execute(&buf, d); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
