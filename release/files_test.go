package main

import (
	"strings"
	"testing"
)

func TestUnit(t *testing.T) {
	u := unit("/usr/bin")
	for _, want := range []string{
		"ExecStartPre=-/sbin/modprobe overlay\n", "ExecStart=/usr/bin/berth\n", "Type=notify\n",
		"Delegate=yes\n", "KillMode=process\n", "Restart=always\n", "RestartSec=5\n",
		"LimitNPROC=infinity\n", "LimitCORE=infinity\n", "LimitNOFILE=infinity\n",
		"TasksMax=infinity\n", "OOMScoreAdjust=-999\n", "WantedBy=multi-user.target\n",
	} {
		if !strings.Contains(u, want) {
			t.Errorf("berth.service lacks %q", want)
		}
	}
}

func TestShippedConfig(t *testing.T) {
	for _, tt := range []struct {
		name, in, want, err string
	}{
		{"default", "cgroup_driver = \"cgroupfs\"\nbin_dirs = [\"/opt/cni/bin\"]\n",
			"cgroup_driver = \"systemd\"\nbin_dirs = [\"/opt/cni/bin\", \"/usr/lib/cni\"]\n", ""},
		{"driver missing", "bin_dirs = [\"/opt/cni/bin\"]\n", "", "cgroup_driver"},
		{"bin_dirs changed", "cgroup_driver = \"cgroupfs\"\nbin_dirs = []\n", "", "bin_dirs"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := shippedConfig(tt.in)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("error %v, want one naming %q", err, tt.err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("got %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

func TestScripts(t *testing.T) {
	for _, tt := range []struct {
		name, script string
		want         []string
	}{
		{"postinst", postinst, []string{"daemon-reload", "enable berth.service", "restart berth.service ||", "exit 0"}},
		{"prerm", prerm, []string{`"$1" = remove`, "/usr/local/bin", "rmp --all --force", "stop berth.slice", "stop berth.service"}},
		{"postrm", postrm, []string{`"$1" = purge`, "/var/lib/berth", "/run/berth", "mountpoint -q"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if !strings.HasPrefix(tt.script, "#!/bin/sh\n") {
				t.Error("no #!/bin/sh")
			}
			for _, w := range tt.want {
				if !strings.Contains(tt.script, w) {
					t.Errorf("lacks %q", w)
				}
			}
		})
	}
}

func TestCrictlYAML(t *testing.T) {
	if strings.Count(crictlYAML, "unix:///run/berth/berth.sock") != 2 {
		t.Errorf("crictl.yaml %q does not point both endpoints at berth", crictlYAML)
	}
}
