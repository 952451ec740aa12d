package cgroup

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

const hybridMountinfo = `22 28 0:21 / /proc rw,nosuid,nodev,noexec,relatime shared:12 - proc proc rw
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
36 31 0:33 / /sys/fs/cgroup/devices rw,relatime - cgroup cgroup rw,devices
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
`

func TestParseMountinfo(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     []Mount
	}{
		{"hybrid", hybridMountinfo, []Mount{{"/sys/fs/cgroup/unified", "/", false}}},
		{"pure v2 with optional fields", "35 24 0:30 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:9 master:3 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot\n",
			[]Mount{{"/sys/fs/cgroup", "/", false}}},
		{"sub-tree mount, escaped space", `1200 1100 0:30 /kubepods/pod\040a /sys/fs/my\040cg ro,nosuid - cgroup2 cgroup rw` + "\n",
			[]Mount{{"/sys/fs/my cg", "/kubepods/pod a", true}}},
		{"v1 only", "36 31 0:33 / /sys/fs/cgroup/devices rw - cgroup cgroup rw,devices\n", nil},
		{"garbage", "\nfoo bar\n1 2 3 4 5 6 -\n", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseMountinfo(strings.NewReader(tc.in))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestParseProcCgroup(t *testing.T) {
	for _, tc := range []struct {
		name, in, want string
		noCgroup2      bool
	}{
		{"hybrid root", "9:name=systemd:/\n4:memory:/process_api/1a\n0::/\n", "/", false},
		{"pure v2", "0::/kubepods.slice/kubepods-pod1.slice/cri-containerd-ab.scope\n", "/kubepods.slice/kubepods-pod1.slice/cri-containerd-ab.scope", false},
		{"deleted", "0::/a/b (deleted)\n", "/a/b", false},
		{"v1 only", "4:memory:/x\n1:cpu:/\n", "", true},
		{"outside namespace", "0::/../../other\n", "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseProcCgroup(strings.NewReader(tc.in))
			if tc.noCgroup2 {
				if !errors.Is(err, ErrNoCgroup2) {
					t.Fatalf("got %q, %v; want ErrNoCgroup2", got, err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %q, %v; want %q", got, err, tc.want)
			}
		})
	}
	if _, err := ParseProcCgroup(strings.NewReader("0::relative\n")); err == nil {
		t.Fatal("relative path accepted")
	}
}

func TestResolve(t *testing.T) {
	for _, tc := range []struct {
		name    string
		mounts  []Mount
		cgroup  string
		wantDir string
	}{
		{"hybrid", []Mount{{Mountpoint: "/sys/fs/cgroup/unified", Root: "/"}}, "/", "/sys/fs/cgroup/unified"},
		{"pure", []Mount{{Mountpoint: "/sys/fs/cgroup", Root: "/"}}, "/a/b.scope", "/sys/fs/cgroup/a/b.scope"},
		{"sub-tree mount", []Mount{{Mountpoint: "/x", Root: "/other"}, {Mountpoint: "/sys/fs/cgroup", Root: "/kubepods"}}, "/kubepods/pod1/c", "/sys/fs/cgroup/pod1/c"},
		{"sub-tree mount, own root", []Mount{{Mountpoint: "/sys/fs/cgroup", Root: "/kubepods"}}, "/kubepods", "/sys/fs/cgroup"},
		{"writable before read-only", []Mount{{Mountpoint: "/sys/fs/cgroup", Root: "/", ReadOnly: true}, {Mountpoint: "/run/kemu-cgroup2", Root: "/"}}, "/", "/run/kemu-cgroup2"},
		{"read-only only", []Mount{{Mountpoint: "/sys/fs/cgroup", Root: "/", ReadOnly: true}}, "/a", "/sys/fs/cgroup/a"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, err := Resolve(tc.mounts, tc.cgroup)
			if err != nil || h.Dir != tc.wantDir {
				t.Fatalf("got %+v, %v; want dir %s", h, err, tc.wantDir)
			}
		})
	}
	if _, err := Resolve(nil, "/"); !errors.Is(err, ErrNoCgroup2) {
		t.Fatalf("no mounts: %v", err)
	}
	if _, err := Resolve([]Mount{{Mountpoint: "/sys/fs/cgroup", Root: "/kubepods"}}, "/kubepodsX/a"); !errors.Is(err, ErrNoCgroup2) {
		t.Fatalf("outside the mount: %v", err)
	}
}
