// Command nonewprivs is /usr/local/bin/nnp of the test image published as
// registry.k8s.io/e2e-test-images/nonewprivs:1.3 in the offline test registry
// (hack/build-images). The image installs it setuid root and runs it as uid
// 1000: it prints the effective uid, 0 when the setuid bit took effect and
// 1000 when no_new_privs kept it from doing so (critest's NoNewPrivs specs).
package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Printf("Effective uid: %d\n", os.Geteuid())
}
