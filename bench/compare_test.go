package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestParseCompareFlags(t *testing.T) {
	tests := []struct {
		name    string
		env     map[string]string
		args    []string
		want    compareOptions
		wantErr string
	}{
		{
			name: "defaults",
			want: compareOptions{n: 20, c: 10, execs: 50, pulls: 3, timingsN: 20, list: "100,250", chains: []string{"plain", "portmap"}, out: "/o/bench", huge: 1 << 30},
		},
		{
			name: "environment",
			env: map[string]string{"BENCH_N": "3", "BENCH_C": "4", "BENCH_LIST": "10", "BENCH_EXECS": "5", "BENCH_PULLS": "1",
				"BENCH_TIMINGS_N": "7", "BENCH_CHAINS": "portmap", "BENCH_OUT": "/x", "BENCH_HUGE": "1024"},
			want: compareOptions{n: 3, c: 4, execs: 5, pulls: 1, timingsN: 7, list: "10", chains: []string{"portmap"}, out: "/x", huge: 1024},
		},
		{
			name: "flags win over the environment",
			env:  map[string]string{"BENCH_N": "3"},
			args: []string{"-n", "9", "-chains", "plain,portmap"},
			want: compareOptions{n: 9, c: 10, execs: 50, pulls: 3, timingsN: 20, list: "100,250", chains: []string{"plain", "portmap"}, out: "/o/bench", huge: 1 << 30},
		},
		{
			name: "pull only is the plain chain",
			env:  map[string]string{"BENCH_PULL_ONLY": "1", "BENCH_CHAINS": "portmap"},
			want: compareOptions{n: 20, c: 10, execs: 50, pulls: 3, timingsN: 20, list: "100,250", chains: []string{"plain"}, out: "/o/bench", pullOnly: true, huge: 1 << 30},
		},
		{name: "unknown chain", env: map[string]string{"BENCH_CHAINS": "plain flannel"}, wantErr: `unknown chain "flannel"`},
		{name: "stray argument", args: []string{"extra"}, wantErr: "unexpected arguments"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, k := range []string{"BENCH_N", "BENCH_C", "BENCH_LIST", "BENCH_EXECS", "BENCH_PULLS", "BENCH_TIMINGS_N", "BENCH_CHAINS", "BENCH_OUT", "BENCH_PULL_ONLY", "BENCH_HUGE"} {
				t.Setenv(k, tt.env[k])
			}
			t.Setenv("BERTH_OUTPUT", "/o")
			t.Setenv("BERTH_BINARY", "/o/bin/berth")
			t.Setenv("BERTH_CNI_BIN_DIR", "/cni")
			o, err := parseCompareFlags(tt.args)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tt.want.berth, tt.want.cniBin = "/o/bin/berth", "/cni"
			if o.n != tt.want.n || o.c != tt.want.c || o.execs != tt.want.execs || o.pulls != tt.want.pulls ||
				o.timingsN != tt.want.timingsN || o.list != tt.want.list || !slices.Equal(o.chains, tt.want.chains) ||
				o.out != tt.want.out || o.pullOnly != tt.want.pullOnly || o.huge != tt.want.huge ||
				o.berth != tt.want.berth || o.cniBin != tt.want.cniBin {
				t.Errorf("got %+v, want %+v", *o, tt.want)
			}
		})
	}
}

func TestConflist(t *testing.T) {
	h := &compareHost{work: "/tmp/bbench.1", netName: "bbench-42"}
	for _, c := range chains {
		t.Run(c.name, func(t *testing.T) {
			var conf struct {
				Name    string `json:"name"`
				Plugins []struct {
					Type   string `json:"type"`
					Bridge string `json:"bridge"`
					IPMasq bool   `json:"ipMasq"`
					IPAM   struct {
						DataDir string `json:"dataDir"`
					} `json:"ipam"`
				} `json:"plugins"`
			}
			if err := json.Unmarshal([]byte(h.conflist(c)), &conf); err != nil {
				t.Fatal(err)
			}
			var types []string
			for _, p := range conf.Plugins {
				types = append(types, p.Type)
			}
			want := []string{"bridge"}
			if c.portmap {
				want = append(want, "portmap")
			}
			if conf.Name != "bbench-42" || !slices.Equal(types, want) || conf.Plugins[0].Bridge != compareBridge ||
				conf.Plugins[0].IPMasq || conf.Plugins[0].IPAM.DataDir != "/tmp/bbench.1/ipam" {
				t.Errorf("conflist %+v", conf)
			}
		})
	}
}

func TestLogTail(t *testing.T) {
	p := filepath.Join(t.TempDir(), "log")
	if err := os.WriteFile(p, []byte("a\nb\nc\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for n, want := range map[int]string{2: "b\nc", 5: "a\nb\nc"} {
		if got := logTail(p, n); got != want {
			t.Errorf("logTail(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestCompareExitCode(t *testing.T) {
	if got := compareExitCode(signalled{2}); got != 130 {
		t.Errorf("SIGINT: %d, want 130", got)
	}
	if got := compareExitCode(os.ErrNotExist); got != 1 {
		t.Errorf("other error: %d, want 1", got)
	}
}

func TestFindBerthBinaries(t *testing.T) {
	tests := []struct {
		name      string
		files     []string // made executable in the berth's dir
		wantErr   string
		wantPause string // the pause command's first word, relative to the dir
	}{
		{name: "berth missing", files: nil, wantErr: "not found"},
		{name: "monitor missing", files: []string{"berth"}, wantErr: "berth-monitor not found"},
		{name: "built-in pause", files: []string{"berth", "berth-monitor"}, wantPause: "berth"},
		{name: "small pause", files: []string{"berth", "berth-monitor", "berth-pause"}, wantPause: "berth-pause"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			for _, f := range tt.files {
				if err := os.WriteFile(filepath.Join(dir, f), []byte("#!/bin/sh\n"), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			b, err := findBerthBinaries(filepath.Join(dir, "berth"))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if b.monitor != filepath.Join(dir, "berth-monitor") || b.pause[0] != filepath.Join(dir, tt.wantPause) {
				t.Errorf("got %+v", b)
			}
		})
	}
}
