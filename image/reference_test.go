package image

import (
	"errors"
	"testing"
)

func TestParseReference(t *testing.T) {
	const dgst = "sha256:9700f9a2f5bf2c45f2f605a0bd3bce7cf37420ec9d3ed50ac2758413308766bf"
	tests := []struct {
		in      string
		want    string
		name    string
		wantErr bool
	}{
		{in: "busybox", want: "docker.io/library/busybox:latest", name: "docker.io/library/busybox"},
		{in: "busybox:1.36", want: "docker.io/library/busybox:1.36"},
		{in: "library/busybox", want: "docker.io/library/busybox:latest"},
		{in: "docker.io/busybox", want: "docker.io/library/busybox:latest"},
		{in: "index.docker.io/library/busybox:1", want: "docker.io/library/busybox:1"},
		{in: "user/app:v1", want: "docker.io/user/app:v1"},
		{in: "registry.k8s.io/pause:3.9", want: "registry.k8s.io/pause:3.9", name: "registry.k8s.io/pause"},
		{in: "127.0.0.1:5000/busybox", want: "127.0.0.1:5000/busybox:latest"},
		{in: "localhost:5000/a/b/c:tag", want: "localhost:5000/a/b/c:tag"},
		{in: "localhost/x", want: "localhost/x:latest"},
		{in: "busybox@" + dgst, want: "docker.io/library/busybox@" + dgst},
		{in: "busybox:1.36@" + dgst, want: "docker.io/library/busybox@" + dgst},
		{in: "gcr.io/k8s-staging-cri-tools/test-image-digest@" + dgst, want: "gcr.io/k8s-staging-cri-tools/test-image-digest@" + dgst},
		{in: "", wantErr: true},
		{in: "Busybox", wantErr: true},
		{in: "busybox:", wantErr: true},
		{in: "busybox@sha256:abc", wantErr: true},
		{in: " busybox", wantErr: true},
		{in: "a:b:c", wantErr: true},
		{in: "busybox:bad tag", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseReference(tt.in)
			if tt.wantErr {
				if !errors.Is(err, ErrInvalidReference) {
					t.Fatalf("ParseReference(%q) = %v, %v; want ErrInvalidReference", tt.in, got, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.String() != tt.want {
				t.Errorf("String() = %q, want %q", got.String(), tt.want)
			}
			if tt.name != "" && got.Name() != tt.name {
				t.Errorf("Name() = %q, want %q", got.Name(), tt.name)
			}
		})
	}
}

func TestParseUser(t *testing.T) {
	tests := []struct {
		user     string
		uid      int64 // -1: none
		username string
	}{
		{"", -1, ""},
		{"1002", 1002, ""},
		{"1003:1004", 1003, ""},
		{"www-data", -1, "www-data"},
		{"www-data:1004", -1, "www-data"},
		{"0", 0, ""},
	}
	for _, tt := range tests {
		uid, name := parseUser(tt.user)
		gotUID := int64(-1)
		if uid != nil {
			gotUID = *uid
		}
		if gotUID != tt.uid || name != tt.username {
			t.Errorf("parseUser(%q) = %d, %q; want %d, %q", tt.user, gotUID, name, tt.uid, tt.username)
		}
	}
}
