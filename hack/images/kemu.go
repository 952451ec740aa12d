package main

// The kemu images (-set kemu). How QEMU gets into them — a decision, see
// docs/deploy.md:
//
// QEMU, qemu-img and their firmware are copied from this machine's installed
// Debian packages (hack/install-deps.sh installs them), and every shared
// library they load is found with ldd (plus what QEMU dlopens: its TCG
// accelerator module, libgcc_s for glibc's thread cancellation). Extracting
// Debian's .debs with dpkg-deb would need apt downloads of the whole package
// closure (qemu-system-x86 depends on ~100 packages: SPICE, GTK, audio, ...)
// for a larger image; copying installed files takes a second and takes only
// what runs. The result is reproducible for the same package versions, which
// the images carry as labels (dev.kemu.debian.<package>=<version>) and the
// make target's stamp hashes.
//
// Layers: base (merged-/usr symlinks, /tmp, CA certificates), qemu (QEMU,
// qemu-img, libraries, firmware), then one layer per image with its Go
// binaries. The launcher and the node agent share base and qemu (the same
// bytes, so the same digests: a node stores them once); the controller
// shares base.

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/kemu-dev/kemu/hack/images/gobuild"
	"github.com/kemu-dev/kemu/launcher"
)

// Image names (the tag is -version; each archive also names :latest, which
// deploy/ uses with imagePullPolicy IfNotPresent).
const (
	LauncherRepo   = "kemu.local/kemu-launcher"
	ControllerRepo = "kemu.local/kemu-controller"
	NodeagentRepo  = "kemu.local/kemu-nodeagent"
	APIRepo        = "kemu.local/kemu-api"
)

// kemuImages are the images buildKemu writes (<name>.oci.tar).
var kemuImages = []string{"kemu-launcher", "kemu-controller", "kemu-api", "kemu-nodeagent"}

// Where things sit in the images (the launcher Pod template and the node
// agent's defaults expect these paths).
const (
	imageBin    = "usr/bin"
	probeKernel = "usr/share/kemu/probe/vmlinuz"
	probeInitrd = "usr/share/kemu/probe/initrd.img"
	imagePATH   = "PATH=/usr/local/bin:/usr/bin:/bin"
)

// qemuBinaries are copied with their libraries: QEMU, qemu-img, the
// virtiofsd the launcher runs for filesystems (QEMU 7.2's, from
// qemu-system-common), the swtpm it runs for a TPM (swtpm, with
// swtpm-libs' libswtpm_libtpms and libtpms0) and the passt it runs for
// passt-bound interfaces.
var qemuBinaries = []string{"/usr/bin/qemu-system-x86_64", "/usr/bin/qemu-img", launcher.DefaultVirtiofsd, launcher.DefaultSwtpm, launcher.DefaultPasst}

// qemuDlopened are libraries QEMU loads at run time, which ldd does not list:
// the TCG accelerator is a module in Debian's QEMU (without it -accel tcg
// fails), glibc dlopens libgcc_s.so.1 for pthread_exit/cancel.
var qemuDlopened = []string{
	"/usr/lib/x86_64-linux-gnu/qemu/accel-tcg-x86_64.so",
	"/lib/x86_64-linux-gnu/libgcc_s.so.1",
}

// firmwareDirs are copied whole: Debian's QEMU searches /usr/share/qemu,
// /usr/share/seabios and /usr/lib/ipxe/qemu (its --firmwarepath) for
// bios-256k.bin, the VGA BIOSes and the NICs' option ROMs (efi-virtio.rom,
// efi-e1000.rom, ...); the launcher looks for OVMF in /usr/share/OVMF.
var firmwareDirs = []string{"/usr/share/seabios", "/usr/lib/ipxe/qemu", "/usr/share/OVMF"}

// qemuDataFiles are the x86 files of /usr/share/qemu (the rest is firmware
// of other architectures, other keymaps, trace event lists): option ROMs
// QEMU loads for x86 machines and direct kernel boot, the firmware
// descriptors, and the VNC server's default keymap (QEMU refuses to start
// -vnc without it).
var qemuDataFiles = []string{
	"kvmvapic.bin", "linuxboot.bin", "linuxboot_dma.bin", "multiboot.bin", "multiboot_dma.bin",
	"pvh.bin", "qboot.rom", "bios-microvm.bin", "sgabios.bin", "vof.bin",
	"firmware/40-edk2-x86_64-secure-enrolled.json", "firmware/50-edk2-x86_64-secure.json", "firmware/60-edk2-x86_64.json",
	"keymaps/en-us",
}

// debianPackages are the packages whose files the qemu layer takes; their
// versions become image labels.
var debianPackages = []string{"qemu-system-x86", "qemu-system-common", "qemu-system-data", "qemu-utils",
	"seabios", "ipxe-qemu", "ovmf", "swtpm", "swtpm-libs", "libtpms0", "libc6", "ca-certificates", "passt"}

const caBundle = "/etc/ssl/certs/ca-certificates.crt"

func runKemu(out, version, testguest string, ts time.Time) error {
	t0 := time.Now()
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	if testguest == "" {
		root, err := repoRoot()
		if err != nil {
			return err
		}
		testguest = filepath.Join(root, "_out", "testguest")
	}
	kernel, initrd := filepath.Join(testguest, "vmlinuz"), filepath.Join(testguest, "initrd.img")
	for _, p := range []string{kernel, initrd} {
		if _, err := os.Stat(p); err != nil {
			return fmt.Errorf("the KVM probe guest: %w (run: make testguest)", err)
		}
	}
	for _, p := range append(append([]string{caBundle}, qemuBinaries...), qemuDlopened...) {
		if _, err := os.Stat(p); err != nil {
			return fmt.Errorf("%w (run: make deps, which installs QEMU, OVMF, SeaBIOS, iPXE, swtpm)", err)
		}
	}
	tmp, err := os.MkdirTemp(out, ".build-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)

	// Go binaries, static (no cgo anywhere in kemu: these run without a libc).
	bins := []string{"kemu-launcher", "kemu-copy", "kemuctl", "kemu-controller", "kemu-nodeagent", "kemu-api"}
	for _, b := range bins {
		if err := gobuild.Build(filepath.Join(tmp, b), "github.com/kemu-dev/kemu/cmd/"+b, version); err != nil {
			return err
		}
		if err := staticELF(filepath.Join(tmp, b)); err != nil {
			return err
		}
	}
	tBuild := time.Since(t0)

	labels, err := packageLabels(version)
	if err != nil {
		return err
	}
	base := &layerSpec{
		name:     "base",
		files:    []file{{caBundle, strings.TrimPrefix(caBundle, "/"), 0o644}},
		dirs:     []string{"tmp", "var/tmp", "var/lib/kemu", "var/run/kemu", "etc"},
		dirModes: map[string]int64{"tmp": 0o1777, "var/tmp": 0o1777},
		symlinks: map[string]string{},
	}
	// Debian 12's merged /usr: /lib, /lib64, /bin, /sbin are symlinks; the
	// loader's path (/lib64/ld-linux-x86-64.so.2) goes through them.
	for _, l := range []string{"/lib", "/lib64", "/bin", "/sbin"} {
		if t, err := os.Readlink(l); err == nil {
			base.symlinks[strings.TrimPrefix(l, "/")] = t
		}
	}
	qemu, err := qemuLayer(base.symlinks)
	if err != nil {
		return err
	}
	bin := func(names ...string) []file {
		var fs []file
		for _, n := range names {
			fs = append(fs, file{filepath.Join(tmp, n), path.Join(imageBin, n), 0o755})
		}
		return fs
	}
	launcherL := &layerSpec{name: "launcher", files: bin("kemu-launcher", "kemu-copy", "kemuctl")}
	controllerL := &layerSpec{name: "controller", files: bin("kemu-controller")}
	apiL := &layerSpec{name: "api", files: bin("kemu-api")}
	nodeagentL := &layerSpec{name: "nodeagent", files: append(bin("kemu-nodeagent"),
		file{kernel, probeKernel, 0o644}, file{initrd, probeInitrd, 0o644})}
	refs := func(repo string) []string { return []string{repo + ":" + version, repo + ":latest"} }
	specs := []imageSpec{
		{name: "kemu-launcher", refs: refs(LauncherRepo), layers: []*layerSpec{base, qemu, launcherL},
			entrypoint: []string{"/usr/bin/kemu-launcher"}, env: []string{imagePATH}, labels: labels},
		{name: "kemu-controller", refs: refs(ControllerRepo), layers: []*layerSpec{base, controllerL},
			entrypoint: []string{"/usr/bin/kemu-controller"}, env: []string{imagePATH}, labels: labels, user: "65532:65532"},
		{name: "kemu-api", refs: refs(APIRepo), layers: []*layerSpec{base, apiL},
			entrypoint: []string{"/usr/bin/kemu-api"}, env: []string{imagePATH}, labels: labels, user: "65532:65532"},
		{name: "kemu-nodeagent", refs: refs(NodeagentRepo), layers: []*layerSpec{base, qemu, nodeagentL},
			entrypoint: []string{"/usr/bin/kemu-nodeagent"}, env: []string{imagePATH}, labels: labels},
	}
	w := newWriter(ts)
	for _, s := range specs {
		d, err := w.writeArchive(filepath.Join(out, s.name+".oci.tar"), s)
		if err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
		fmt.Printf("%s %s %s\n", s.name, s.refs[0], d)
	}
	fmt.Printf("built in %s (go build %s)\n", time.Since(t0).Round(10*time.Millisecond), tBuild.Round(10*time.Millisecond))
	return nil
}

// qemuLayer collects QEMU, qemu-img, their libraries and firmware. Paths go
// into the image as they are on this host, each symlink on the way (e.g.
// libz.so.1 -> libz.so.1.2.13) as a symlink; dirLinks are the top-level
// directory symlinks (lib -> usr/lib) the base layer has, resolved here.
func qemuLayer(dirLinks map[string]string) (*layerSpec, error) {
	l := &layerSpec{name: "qemu", symlinks: map[string]string{}}
	seen := map[string]bool{}
	var add func(p string, depth int) error
	add = func(p string, depth int) error {
		if depth > 16 {
			return fmt.Errorf("%s: too many symlinks", p)
		}
		dir, err := filepath.EvalSymlinks(filepath.Dir(p))
		if err != nil {
			return err
		}
		p = filepath.Join(dir, filepath.Base(p))
		if seen[p] {
			return nil
		}
		seen[p] = true
		st, err := os.Lstat(p)
		if err != nil {
			return err
		}
		dest := strings.TrimPrefix(p, "/")
		switch {
		case st.Mode()&os.ModeSymlink != 0:
			t, err := os.Readlink(p)
			if err != nil {
				return err
			}
			l.symlinks[dest] = t
			if !filepath.IsAbs(t) {
				t = filepath.Join(dir, t)
			}
			return add(t, depth+1)
		case st.Mode().IsRegular():
			l.files = append(l.files, file{p, dest, int64(st.Mode().Perm())})
			return nil
		case st.IsDir():
			ents, err := os.ReadDir(p)
			if err != nil {
				return err
			}
			for _, e := range ents {
				if err := add(filepath.Join(p, e.Name()), depth); err != nil {
					return err
				}
			}
			return nil
		}
		return fmt.Errorf("%s: not a file, directory or symlink", p)
	}
	elves := append(append([]string(nil), qemuBinaries...), qemuDlopened...)
	for _, b := range elves {
		if err := add(b, 0); err != nil {
			return nil, err
		}
		libs, err := ldd(b)
		if err != nil {
			return nil, err
		}
		for _, lib := range libs {
			if err := add(lib, 0); err != nil {
				return nil, err
			}
		}
	}
	for _, d := range firmwareDirs {
		if err := add(d, 0); err != nil {
			return nil, fmt.Errorf("%w (run: make deps)", err)
		}
	}
	for _, f := range qemuDataFiles {
		if err := add(filepath.Join("/usr/share/qemu", f), 0); err != nil {
			return nil, fmt.Errorf("%w (run: make deps)", err)
		}
	}
	// A symlink whose parent is a top-level directory link (lib/...) was
	// resolved above; nothing may land at a path the base layer links.
	for p := range l.symlinks {
		if _, ok := dirLinks[p]; ok {
			delete(l.symlinks, p)
		}
	}
	sort.Slice(l.files, func(i, j int) bool { return l.files[i].dest < l.files[j].dest })
	return l, nil
}

// ldd returns the absolute paths of the libraries (and the loader) an ELF
// file needs, as this host's loader resolves them.
func ldd(p string) ([]string, error) {
	out, err := exec.Command("ldd", p).Output()
	if err != nil {
		return nil, fmt.Errorf("ldd %s: %w", p, err)
	}
	var libs []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		switch {
		case len(f) >= 3 && f[1] == "=>" && strings.HasPrefix(f[2], "/"):
			libs = append(libs, f[2])
		case len(f) >= 3 && f[1] == "=>" && f[2] == "not":
			return nil, fmt.Errorf("ldd %s: %s not found", p, f[0])
		case len(f) >= 1 && strings.HasPrefix(f[0], "/"):
			libs = append(libs, f[0]) // the loader
		}
	}
	return libs, sc.Err()
}

// packageLabels are the image labels: kemu's version and the Debian
// package versions the qemu layer comes from.
func packageLabels(version string) (map[string]string, error) {
	args := append([]string{"-W", "-f", "${Package} ${Version}\n"}, debianPackages...)
	out, err := exec.Command("dpkg-query", args...).Output()
	if err != nil {
		return nil, fmt.Errorf("dpkg-query %s: %w (run: make deps)", strings.Join(debianPackages, " "), err)
	}
	m := map[string]string{"org.opencontainers.image.version": version, "org.opencontainers.image.source": "https://github.com/kemu-dev/kemu"}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if f := strings.Fields(line); len(f) == 2 {
			m["dev.kemu.debian."+f[0]] = f[1]
		}
	}
	return m, nil
}

// repoRoot is the folder holding go.mod, from the working directory up.
func repoRoot() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := wd; ; d = filepath.Dir(d) {
		if b, err := os.ReadFile(filepath.Join(d, "go.mod")); err == nil && bytes.Contains(b, []byte("module github.com/kemu-dev/kemu\n")) {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", errors.New("not inside the kemu repository (no go.mod of github.com/kemu-dev/kemu); pass -testguest")
		}
	}
}
