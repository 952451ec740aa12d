// Package gobuild builds a kemu binary as its release and image do, so that
// what the benchmarks measure is what runs in a Pod.
package gobuild

import (
	"fmt"
	"os"
	"os/exec"
)

// Tags are the release build tags (the Makefile's BUILD_TAGS): grpc-go
// without x/net/trace, whose html/template keeps every exported method
// alive in the linker.
const Tags = "grpcnotrace"

// Build builds pkg statically (CGO_ENABLED=0, linux/amd64, stripped) into
// dest, with -X main.version=version when version is not "".
func Build(dest, pkg, version string) error {
	ldflags := "-s -w"
	if version != "" {
		ldflags += " -X main.version=" + version
	}
	build := exec.Command("go", "build", "-trimpath", "-tags", Tags, "-ldflags="+ldflags, "-o", dest, pkg)
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64")
	if b, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s: %v\n%s", pkg, err, b)
	}
	return nil
}
