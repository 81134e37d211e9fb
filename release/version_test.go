package main

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/goreleaser/nfpm/v2"
	_ "github.com/goreleaser/nfpm/v2/deb"
)

// debVersion is the version nfpm gives the .deb of a berth version, as
// packageDeb names it.
func debVersion(t *testing.T, version string) string {
	t.Helper()
	info := nfpm.WithDefaults(&nfpm.Info{Name: "berth", Arch: "amd64", Platform: "linux",
		Version: strings.TrimPrefix(version, "v"), Maintainer: "m <m@localhost>", Description: "d"})
	if err := nfpm.PrepareForPackager(info, "deb"); err != nil {
		t.Fatal(err)
	}
	pkg, err := nfpm.Get("deb")
	if err != nil {
		t.Fatal(err)
	}
	name := strings.TrimSuffix(strings.TrimPrefix(pkg.ConventionalFileName(info), "berth_"), "_amd64.deb")
	return name
}

// TestDebVersionsOrder: the versions hack/version makes sort in dpkg as
// their commits do, so that installing a newer build's .deb is an
// upgrade (and an older one a downgrade).
func TestDebVersionsOrder(t *testing.T) {
	if _, err := exec.LookPath("dpkg"); err != nil {
		t.Skip("no dpkg")
	}
	for _, tc := range [][2]string{
		{"0.0.0-git.20261206101010.ffffff0", "0.0.0-git.20261206101011.0000000"},
		{"0.0.0-git.20261206101010.abcdef0", "0.0.0-git.20261206101010.abcdef0.dirty"},
		{"0.0.0-git.20261206101010.abcdef0", "v0.1.0"},
		{"v0.1.0", "v0.1.0+git.20270101000000.1234567"},
		{"v0.1.0+git.20270101000000.1234567", "v0.1.1"},
	} {
		older, newer := debVersion(t, tc[0]), debVersion(t, tc[1])
		if err := exec.Command("dpkg", "--compare-versions", older, "lt", newer).Run(); err != nil {
			t.Errorf("dpkg: %s (from %s) is not older than %s (from %s)", older, tc[0], newer, tc[1])
		}
	}
}
