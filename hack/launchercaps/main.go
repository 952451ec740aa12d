// Command launchercaps prints every capability a launcher's compute
// container may hold (launcherpod.AllCapabilities) as CAP_ names, one
// argument each: hack/update-codegen.sh gives them to
// hack/containerd/seccompgen.
package main

import (
	"fmt"
	"strings"

	"github.com/kemu-dev/kemu/nodeagent/seccomp"
)

func main() {
	fmt.Println(strings.Join(seccomp.Capabilities(), " "))
}
