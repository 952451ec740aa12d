package launcherpod

import (
	"flag"
	"reflect"
	"testing"
	"time"
)

// What the controller renders is what kemu-launcher reads.
func TestConfigRoundTrip(t *testing.T) {
	for _, c := range []Config{
		{},
		Defaults(),
		{SocketsDir: SocketsDir, RuntimeDir: RuntimeDir, ImageCache: ImageCache, PVCRoot: PVCRoot, SecretsDir: SecretsDir,
			ContainerDiskDir: ContainerDisksDir, KernelBootDir: KernelBootDir, ImageVolumes: true, Accel: "tcg", GracePeriod: 45 * time.Second,
			VMIUID: "0e7c3b0a-1f2d-4c5e-9a8b-7c6d5e4f3a2b"},
		{Accel: "kvm", AllowRawQMP: true, RuntimeDir: "/a dir/with = and,commas"},
	} {
		got := Defaults()
		fs := flag.NewFlagSet("kemu-launcher", flag.ContinueOnError)
		got.Bind(fs)
		if err := fs.Parse(c.Args()); err != nil {
			t.Fatalf("%v: %v", c.Args(), err)
		}
		if fs.NArg() != 0 || !reflect.DeepEqual(got, c) {
			t.Errorf("Args %q parsed to %+v, want %+v", c.Args(), got, c)
		}
	}
}

// Every field is rendered: a new field without a flag fails here.
func TestArgsCoverEveryField(t *testing.T) {
	if n, f := len(Config{}.Args()), reflect.TypeOf(Config{}).NumField(); n != f {
		t.Errorf("%d flags for %d fields", n, f)
	}
}
