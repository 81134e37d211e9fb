package main

import (
	"slices"
	"testing"
)

func TestSummarize(t *testing.T) {
	for _, tc := range []struct{ name, out, want string }{
		{
			name: "skips with reasons, then the summary",
			out: `• [0.5 seconds]
S [SKIPPED] [0.022 seconds]
[k8s.io] AppArmor should fail with an unloaded apparmor_profile
  [BeforeEach] sigs.k8s.io/cri-tools@v1.37.0/pkg/validate/apparmor_linux.go:78

  [SKIPPED] AppArmor is disabled on this host
  In [BeforeEach] at: apparmor_linux.go:80
------------------------------
S [SKIPPED] [0.001 seconds]
[k8s.io] Image Manager public image with digest should be pulled and removed
  [SKIPPED] in [It] - image.go:1
  [SKIPPED] Skipped by -ginkgo.skip
Ran 127 of 142 Specs in 57.335 seconds
SUCCESS! -- 127 Passed | 0 Failed | 0 Pending | 15 Skipped
PASS
`,
			want: `  [SKIPPED] [k8s.io] AppArmor should fail with an unloaded apparmor_profile: AppArmor is disabled on this host
  [SKIPPED] [k8s.io] Image Manager public image with digest should be pulled and removed: Skipped by -ginkgo.skip
Ran 127 of 142 Specs in 57.335 seconds
SUCCESS! -- 127 Passed | 0 Failed | 0 Pending | 15 Skipped
PASS
`,
		},
		{
			name: "a skip without a reason names nothing, the failures come first",
			out: `S [SKIPPED] [0.1 seconds]
[k8s.io] one
S [SKIPPED] [0.1 seconds]
[k8s.io] two
  [SKIPPED] why two
Summarizing 1 Failure:
  [FAIL] [k8s.io] three
Ran 3 of 3 Specs
`,
			want: `  [SKIPPED] [k8s.io] two: why two
Summarizing 1 Failure:
  [FAIL] [k8s.io] three
Ran 3 of 3 Specs
`,
		},
		{
			name: "succinct output: the last line",
			out:  "•••\nok 5 specs\n",
			want: "ok 5 specs\n",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := summarize(tc.out); got != tc.want {
				t.Errorf("summarize:\n%s\nwant:\n%s", got, tc.want)
			}
		})
	}
}

func TestCritestArgs(t *testing.T) {
	b := &berth{work: "/w"}
	base := []string{"--runtime-endpoint", "unix:///w/berth.sock", "--image-endpoint", "unix:///w/berth.sock", "--nri-socket", "/w/nri.sock", "-ginkgo.no-color"}
	for _, tc := range []struct {
		name  string
		nodes int
		args  []string
		want  []string
	}{
		{"validation on 4 processes", 4, []string{"-ginkgo.focus=Image"}, append(append([]string{}, base...), "-ginkgo.v", "-parallel", "4", "-ginkgo.focus=Image")},
		{"one process", 1, nil, append(append([]string{}, base...), "-ginkgo.v")},
		{"-parallel given", 4, []string{"--parallel", "2"}, append(append([]string{}, base...), "-ginkgo.v", "--parallel", "2")},
		{"benchmark: succinct, serial", 4, []string{"-benchmark"}, append(append([]string{}, base...), "-benchmark")},
		{"benchmark=false", 4, []string{"--benchmark=false"}, append(append([]string{}, base...), "-ginkgo.v", "-parallel", "4", "--benchmark=false")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := critestArgs(b, tc.nodes, tc.args); !slices.Equal(got, tc.want) {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}
