package main

import (
	"fmt"
	"strings"

	securejoin "github.com/cyphar/filepath-securejoin"
	"golang.org/x/sys/unix"
)

// inRoot resolves a path of the image inside root, its symlinks followed
// as the node would (Debian's /lib is a link to usr/lib) and never out of
// root.
func inRoot(root, p string) (string, error) {
	resolved, err := securejoin.SecureJoin(root, p)
	if err != nil {
		return "", fmt.Errorf("resolve %s in the node's root: %w", p, err)
	}
	return resolved, nil
}

// deviceNumber is the device a device file names.
func deviceNumber(p string) (uint64, bool) {
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		return 0, false
	}
	return st.Rdev, true
}

// hasOverlayXattr says whether p carries one of overlayfs's own
// trusted.overlay.* attributes.
func hasOverlayXattr(p string) bool {
	buf := make([]byte, 4096)
	n, err := unix.Llistxattr(p, buf)
	if err != nil || n <= 0 {
		return false
	}
	for _, name := range strings.Split(string(buf[:n]), "\x00") {
		if strings.HasPrefix(name, "trusted.overlay.") {
			return true
		}
	}
	return false
}
