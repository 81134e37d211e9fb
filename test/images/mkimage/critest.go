package main

import (
	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// The images critest v1.37.0 (sigs.k8s.io/cri-tools pkg/validate and
// pkg/framework) pulls by hard-coded names, rebuilt offline. critest runs with
// registry mirrors that send registry.k8s.io, k8s.gcr.io, gcr.io and
// public.ecr.aws to the test registry, so each reference here is the upstream
// name minus its registry host. The default image
// (registry.k8s.io/e2e-test-images/busybox:1.29-2) is the busybox image of
// images.go.
//
// What the suite checks of each, from its sources:
//   - nginx:1.14-2 (HostPID, PodPID, ContainerPID, and the web server of the
//     port mapping specs): HTTP 200 on :80, /var/run/nginx.pid, processes
//     named nginx, "master process" in the command line of the container's
//     PID 1, and sh, cat, grep, sleep.
//   - httpd:2.4.39-4 (Multiple Containers): HTTP 200 on :80, a container log
//     line containing "httpd", and echo.
//   - nonewprivs:1.3 (NoNewPrivs): run as uid 1000, the default command prints
//     "Effective uid: 0" (setuid root binary) unless no_new_privs is set, when
//     it prints "Effective uid: 1000".
//   - k8s-staging-cri-tools/test-image-*: busybox with one marker file each
//     (as upstream's images/image-test), so that test-image-1/-2/-3 and
//     test-image-tag:test/:all are distinct images and test-image-tags:1/2/3
//     one image under three tags; test-image-user-* differ only by USER
//     (ImageStatus reports uid 1002, username www-data, uid 1003, username
//     www-data); test-image-predefined-group runs as default-user (1000) who
//     is in group-defined-in-image (50000) by /etc/group.
//   - k8s-staging-cri-tools/hostnet-nginx-amd64: nginx on :12003, for the host
//     network port-forward spec.
//   - pause:3.9 (registry.k8s.io and k8s.gcr.io both mirror to this one
//     repository, so both names give one image ID): /pause only, run as
//     65535:65535 like upstream's.
//
// test-image-digest@sha256:9700f9a2... cannot be rebuilt: a digest names the
// exact bytes of upstream's manifest.

const criTools = "k8s-staging-cri-tools/"

// markerImage is busybox plus an empty file /NAME, like upstream's image-test.
func markerImage(name, marker string, refs ...string) imageSpec {
	return imageSpec{
		name:     name,
		refs:     refs,
		platform: linuxAMD64,
		config:   busyboxConfig(),
		layers:   onBusybox(entriesLayer{"marker " + marker, []entry{file(marker, "")}}),
	}
}

// userImage is busybox with USER set, like upstream's image-user.
func userImage(name, user string) imageSpec {
	cfg := busyboxConfig()
	cfg.User = user
	return imageSpec{
		name:     name,
		refs:     []string{criTools + name + ":latest"},
		platform: linuxAMD64,
		config:   cfg,
		layers:   onBusybox(),
	}
}

func nginxConfig() v1.Config {
	return v1.Config{
		Cmd:          []string{"nginx", "-g", "daemon off;"},
		Env:          []string{defaultPath},
		ExposedPorts: map[string]struct{}{"80/tcp": {}},
		StopSignal:   "SIGTERM", // as upstream nginx:1.14 (fast shutdown: no wait for keep-alive clients)
	}
}

func critestImages() []imageSpec {
	predefinedGroup := busyboxConfig()
	predefinedGroup.User = "1000"
	hostnet := nginxConfig()
	hostnet.ExposedPorts = map[string]struct{}{"12003/tcp": {}}
	return []imageSpec{
		{
			name:     "nginx",
			refs:     []string{"e2e-test-images/nginx:1.14-2"},
			platform: linuxAMD64,
			config:   nginxConfig(),
			layers:   onBusybox(rootfsLayer{"nginx"}),
		},
		{
			name:     "hostnet-nginx",
			refs:     []string{criTools + "hostnet-nginx-amd64:latest"},
			platform: linuxAMD64,
			config:   hostnet,
			layers: onBusybox(rootfsLayer{"nginx"}, entriesLayer{"nginx on :12003", []entry{
				dir("etc"),
				dir("etc/nginx"),
				dir("etc/nginx/conf.d"),
				file("etc/nginx/conf.d/default.conf", `server {
    listen 12003;
    server_name localhost;
    location / {
        root /usr/share/nginx/html;
        index index.html;
    }
}
`),
			}}),
		},
		{
			name:     "httpd",
			refs:     []string{"e2e-test-images/httpd:2.4.39-4"},
			platform: linuxAMD64,
			config: v1.Config{
				Cmd:          []string{"httpd-foreground"},
				Env:          []string{"PATH=/usr/local/apache2/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
				WorkingDir:   "/usr/local/apache2",
				ExposedPorts: map[string]struct{}{"80/tcp": {}},
				StopSignal:   "SIGWINCH", // as upstream httpd: graceful stop
			},
			layers: onBusybox(rootfsLayer{"httpd"}),
		},
		{
			name:     "nonewprivs",
			refs:     []string{"e2e-test-images/nonewprivs:1.3"},
			platform: linuxAMD64,
			config: v1.Config{
				Cmd:  []string{"/usr/local/bin/nnp"},
				Env:  []string{defaultPath},
				User: "1000",
			},
			layers: onBusybox(rootfsLayer{"nonewprivs"}),
		},
		{
			name:     "pause",
			refs:     []string{"pause:3.9"},
			platform: linuxAMD64,
			config: v1.Config{
				Entrypoint: []string{"/pause"},
				User:       "65535:65535",
			},
			layers: []layerSource{rootfsLayer{"pause"}},
		},
		markerImage("test-image-1", "test-image-1", criTools+"test-image-1:latest"),
		markerImage("test-image-2", "test-image-2", criTools+"test-image-2:latest"),
		markerImage("test-image-3", "test-image-3", criTools+"test-image-3:latest"),
		markerImage("test-image-latest", "test-image-latest", criTools+"test-image-latest:latest"),
		markerImage("test-image-tag-test", "test", criTools+"test-image-tag:test"),
		markerImage("test-image-tags", "same-image",
			criTools+"test-image-tags:1", criTools+"test-image-tags:2", criTools+"test-image-tags:3"),
		userImage("test-image-user-uid", "1002"),
		userImage("test-image-user-username", "www-data"),
		userImage("test-image-user-uid-group", "1003:1004"),
		userImage("test-image-user-username-group", "www-data:1004"),
		{
			name:     "test-image-predefined-group",
			refs:     []string{criTools + "test-image-predefined-group:latest"},
			platform: linuxAMD64,
			config:   predefinedGroup,
			layers: onBusybox(entriesLayer{"default-user in group-defined-in-image", []entry{
				dir("etc"),
				file("etc/passwd", "root:x:0:0:root:/root:/bin/sh\n"+
					"www-data:x:33:33:www-data:/var/www:/bin/false\n"+
					"nobody:x:65534:65534:nobody:/nonexistent:/bin/false\n"+
					"default-user:x:1000:1000:Linux User,,,:/home/default-user:/bin/sh\n"),
				file("etc/group", "root:x:0:\n"+
					"www-data:x:33:\n"+
					"nogroup:x:65534:\n"+
					"default-user:x:1000:\n"+
					"group-defined-in-image:x:50000:default-user\n"),
				dir("home"),
				dir("home/default-user").owned(1000, 1000),
			}}),
		},
	}
}

// critestIndexes: test-image-tag:all is a multi-platform index like upstream's
// (which are all manifest lists), so that "image status should support all
// kinds of references" resolves a repo digest that names an index.
func critestIndexes() []indexSpec {
	return []indexSpec{{
		name: "test-image-tag-all",
		refs: []string{criTools + "test-image-tag:all"},
		images: []imageSpec{
			{
				name:     "test-image-tag-all-amd64",
				oci:      true,
				platform: linuxAMD64,
				config:   busyboxConfig(),
				layers:   onBusybox(entriesLayer{"marker all", []entry{file("all", "")}}),
			},
			{
				name:     "test-image-tag-all-arm64",
				oci:      true,
				platform: linuxARM64,
				config:   v1.Config{Cmd: []string{"/all"}, Env: []string{defaultPath}},
				layers:   []layerSource{entriesLayer{"marker all (arm64, never run)", []entry{file("all", "")}}},
			},
		},
	}}
}
