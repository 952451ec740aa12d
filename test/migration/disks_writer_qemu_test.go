//go:build qemu

package migration

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/kemu-dev/kemu/launcher"
	"github.com/kemu-dev/kemu/launcher/cmdline"
	"github.com/kemu-dev/kemu/test/testguest"
)

// The guest's disk writer: deterministic 4 KiB blocks written with
// O_DIRECT and fsync (busybox 1.35's dd: oflag=direct, conv=fsync; the
// test guest's busybox is the host's busybox-static) to the same places of
// every disk it is given, one round every diskproofPace, until a stop file
// appears.
//
// Block i is at 32 MiB + i × 64 KiB: one block per 64 KiB, the qcow2
// cluster size and the disk mirror's granularity, so a block found on the
// target was copied for its own write, not along with a later write next
// to it. On the containerDisk (the test guest's disk.qcow2: an MBR and one
// FAT16 partition from 1 MiB to the end, whose files end before 14 MiB)
// the range is free clusters of a filesystem nothing mounts (the guest
// runs from its initramfs), in the VM's own overlay (the image is never
// written): the writes harm neither the running guest nor the image. The
// test checks that the range is zeros in the image. The emptyDisk (64 MiB)
// is zeros.
const (
	diskproofBlockSize = 4096
	diskproofStride    = 64 << 10
	diskproofBase      = 32 << 20
	diskproofMax       = 256 // blocks: the range ends at 48 MiB
	diskproofRange     = diskproofMax * diskproofStride
	diskproofDir       = "/run/kemu-diskproof"
	diskproofPace      = "0.2" // seconds between rounds (busybox sleep)
	diskproofKind      = "diskproof"
	diskproofPattern   = "kemu-diskproof-pattern\n"
)

// diskproofScript: $1.. are "device:disk" pairs. Each round writes block i
// to every device, then prints `KEMU-GUEST diskproof status=written
// block=i`; at the stop file `status=done blocks=N`; a failed dd
// `status=failed`, a full range `status=full`.
var diskproofScript = fmt.Sprintf(`P=%[1]s
yes %[2]s | head -c %[3]d > $P/pattern
i=0
while [ ! -e $P/stop ]; do
	if [ $i -ge %[4]d ]; then echo "KEMU-GUEST %[5]s status=full blocks=$i" > /dev/console; exit 1; fi
	for pair in "$@"; do
		dev=${pair%%%%:*} disk=${pair#*:}
		{ printf 'KEMU-DISKPROOF disk=%%s block=%%06d\n' "$disk" "$i"; cat $P/pattern; } | head -c %[3]d > $P/block
		if ! dd if=$P/block of=/dev/$dev bs=%[3]d seek=$((%[6]d + i * %[8]d)) count=1 oflag=direct,seek_bytes conv=fsync,notrunc 2>> $P/err; then
			echo "KEMU-GUEST %[5]s status=failed block=$i dev=$dev" > /dev/console; exit 1
		fi
	done
	echo "KEMU-GUEST %[5]s status=written block=$i uptime=$(cut -d' ' -f1 /proc/uptime)" > /dev/console
	i=$((i + 1))
	sleep %[7]s
done
echo "KEMU-GUEST %[5]s status=done blocks=$i" > /dev/console
`, diskproofDir, strings.TrimSuffix(diskproofPattern, "\n"), diskproofBlockSize, diskproofMax, diskproofKind, diskproofBase, diskproofPace, diskproofStride)

// diskproofBlock is block i of disk as the guest's writer writes it.
func diskproofBlock(disk string, i int) []byte {
	b := fmt.Appendf(nil, "KEMU-DISKPROOF disk=%s block=%06d\n", disk, i)
	for len(b) < diskproofBlockSize {
		b = append(b, diskproofPattern...)
	}
	return b[:diskproofBlockSize]
}

// diskproofDisk is one disk the writer writes: the VMI disk's name, its
// guest device, the file QEMU writes on each side (hard links that outlive
// the launcher's cleanup) and the range's content before the writer.
type diskproofDisk struct {
	name, dev      string
	source, target string
	original       []byte
}

// diskproofDevices maps the VMI's disks to guest devices from the boot's
// block markers: scratch by its serial, root the other one.
func diskproofDevices(t *testing.T, w *testguest.Watcher, scratchSerial string) (root, scratch string) {
	t.Helper()
	blocks := w.Find(testguest.IsKind("block"))
	for _, b := range blocks {
		if b.Field("serial") == scratchSerial {
			scratch = b.Field("name")
		} else {
			root = b.Field("name")
		}
	}
	if len(blocks) != 2 || root == "" || scratch == "" {
		t.Fatalf("guest disks: %v", blocks)
	}
	return root, scratch
}

// diskproofStartWriter installs the writer in the guest and starts it in
// the background (its own session: qemu-ga's guest-exec returns at once).
func diskproofStartWriter(t *testing.T, g *guest, pairs ...string) {
	t.Helper()
	ctx := ctxFor(t, stepTimeout)
	a, err := g.l.Agent(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st, err := a.Run(ctx, "/bin/sh", []string{"-c", "mkdir -p " + diskproofDir + " && cat > " + diskproofDir + "/writer.sh"}, []byte(diskproofScript)); err != nil || st.ExitCode != 0 {
		t.Fatalf("installing the writer: %+v %v", st, err)
	}
	start := fmt.Sprintf("setsid sh %[1]s/writer.sh %[2]s < /dev/null > %[1]s/log 2>&1 &", diskproofDir, strings.Join(pairs, " "))
	if st, err := a.Run(ctx, "/bin/sh", []string{"-c", start}, nil); err != nil || st.ExitCode != 0 {
		t.Fatalf("starting the writer: %+v %v", st, err)
	}
}

// diskproofGuestRun runs a shell command in the guest through the agent.
func diskproofGuestRun(t *testing.T, g *guest, cmd string) {
	t.Helper()
	ctx := ctxFor(t, stepTimeout)
	a, err := g.l.Agent(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st, err := a.Run(ctx, "/bin/sh", []string{"-c", cmd}, nil); err != nil || st.ExitCode != 0 {
		t.Fatalf("guest %q: %+v %v (stderr %q)", cmd, st, err, st.Stderr)
	}
}

// diskproofBlockNumber is the block of a diskproof marker; status=failed
// and status=full end the test.
func diskproofBlockNumber(t *testing.T, g *guest, m testguest.Marker) int {
	t.Helper()
	switch m.Field("status") {
	case "failed", "full":
		t.Fatalf("the guest's writer stopped: %s\n%s", m, g.w.Log())
	}
	n, err := m.Int("block")
	if err != nil {
		t.Fatalf("diskproof marker %s: %v", m, err)
	}
	return int(n)
}

// diskproofWaitBlock waits for the writer to report block n (or to fail).
func diskproofWaitBlock(t *testing.T, g *guest, n int) testguest.Marker {
	t.Helper()
	m := g.wait(t, func(m testguest.Marker) bool {
		if m.Kind != diskproofKind {
			return false
		}
		b, err := m.Int("block")
		return m.Field("status") != "written" || (err == nil && int(b) >= n)
	})
	diskproofBlockNumber(t, g, m)
	return m
}

// diskproofWritten lists the blocks g's console reported written.
func diskproofWritten(t *testing.T, g *guest, markers []testguest.Marker) []int {
	t.Helper()
	var out []int
	for _, m := range markers {
		if m.Kind == diskproofKind && m.Field("status") == "written" {
			out = append(out, diskproofBlockNumber(t, g, m))
		}
	}
	return out
}

// blockNode is one entry of query-named-block-nodes.
type blockNode struct {
	NodeName string `json:"node-name"`
	File     string `json:"file"`
	Drv      string `json:"drv"`
}

// diskproofLink hard-links the file of disk's format node (as QEMU reports
// it) into dir: the launcher removes its volumes when QEMU ends.
func diskproofLink(t *testing.T, l *launcher.Launcher, disk, dir, as string) string {
	t.Helper()
	var nodes []blockNode
	if err := l.Monitor().Execute(ctxFor(t, stepTimeout), "query-named-block-nodes", map[string]any{"flat": true}, &nodes); err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		if n.NodeName != cmdline.NodeName(disk) {
			continue
		}
		if n.Drv != "qcow2" {
			t.Fatalf("disk %s: node %+v, want qcow2", disk, n)
		}
		p := filepath.Join(dir, as)
		if err := os.Link(n.File, p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	t.Fatalf("disk %s: no node %s in %+v", disk, cmdline.NodeName(disk), nodes)
	return ""
}

// diskproofRead reads the writer's range of a disk image on the host
// (qemu-img dd: a qcow2 overlay is read through its backing file; QEMU
// 7.2's count includes the skipped blocks).
func diskproofRead(t *testing.T, image, format string) []byte {
	t.Helper()
	out := filepath.Join(t.TempDir(), "range.raw")
	cmd := exec.CommandContext(ctxFor(t, stepTimeout), "qemu-img", "dd", "-f", format, "-O", "raw",
		"bs="+strconv.Itoa(diskproofStride), "skip="+strconv.Itoa(diskproofBase/diskproofStride),
		"count="+strconv.Itoa((diskproofBase+diskproofRange)/diskproofStride), "if="+image, "of="+out)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("qemu-img dd %s: %v\n%s", image, err, b)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) != diskproofRange {
		t.Fatalf("%s: read %d bytes, want %d", image, len(b), diskproofRange)
	}
	return b
}

// diskproofAt is block i's place in the range.
func diskproofAt(b []byte, i int) []byte {
	return b[i*diskproofStride : i*diskproofStride+diskproofBlockSize]
}

// diskproofExpect is the range after blocks 0..n-1 were written over
// original.
func diskproofExpect(disk string, original []byte, n int) []byte {
	want := bytes.Clone(original)
	for i := 0; i < n; i++ {
		copy(diskproofAt(want, i), diskproofBlock(disk, i))
	}
	return want
}

// diskproofPrefix is how many leading blocks of got are the writer's.
func diskproofPrefix(disk string, got []byte) int {
	n := 0
	for n < diskproofMax && bytes.Equal(diskproofAt(got, n), diskproofBlock(disk, n)) {
		n++
	}
	return n
}

// diskproofCompare checks that got is original with blocks 0..n-1 written
// (and nothing else changed): sha256 of the range, and the first differing
// 4 KiB when it is not.
func diskproofCompare(t *testing.T, what, disk string, got, original []byte, n int) bool {
	t.Helper()
	want := diskproofExpect(disk, original, n)
	gs, ws := sha256.Sum256(got), sha256.Sum256(want)
	if gs == ws {
		t.Logf("%s: sha256 %x = blocks 0..%d written over the original range", what, gs[:8], n-1)
		return true
	}
	for off := 0; off < diskproofRange; off += diskproofBlockSize {
		g, w := got[off:off+diskproofBlockSize], want[off:off+diskproofBlockSize]
		if !bytes.Equal(g, w) {
			t.Errorf("%s: sha256 %x, want %x (blocks 0..%d): at %d (block %d) %q…, want %q…",
				what, gs[:8], ws[:8], n-1, diskproofBase+off, off/diskproofStride, firstLine(g), firstLine(w))
			break
		}
	}
	return false
}

func firstLine(b []byte) []byte {
	if i := bytes.IndexByte(b, '\n'); i >= 0 && i < 64 {
		return b[:i]
	}
	return b[:min(len(b), 32)]
}
