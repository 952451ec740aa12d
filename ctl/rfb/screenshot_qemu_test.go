//go:build qemu

package rfb_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"image"
	"image/png"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"sigs.k8s.io/yaml"

	"github.com/kemu-dev/kemu/ctl/rfb"
	"github.com/kemu-dev/kemu/launcher"
	"github.com/kemu-dev/kemu/launcher/cmdserver"
	"github.com/kemu-dev/kemu/launcher/rpc"
	"github.com/kemu-dev/kemu/launcher/unpriv"
	"github.com/kemu-dev/kemu/test/testguest"
)

const vmiYAML = `apiVersion: kemu.dev/v1alpha1
kind: VirtualMachineInstance
metadata: {name: screen, uid: 11111111-2222-3333-4444-555555555555}
spec:
  domain:
    memory: {guest: 256Mi}
    devices:
      autoattachPodInterface: false
      disks:
      - {name: root, bootOrder: 1, disk: {bus: virtio}}
  volumes:
  - {name: root, containerDisk: {image: "oci:_out/testguest/oci/containerdisk"}}
`

// The test guest with the default graphics device, booted by the launcher
// behind its command server: a screenshot through the Vnc RPC is not blank,
// has the size of the screen QEMU dumps itself (QMP screendump, taken right
// after) and the same pixels but for a few (the blinking cursor), and
// encodes as a PNG that decodes; the launcher serves at most MaxVNCStreams
// at once.
func TestScreenshotThroughLauncher(t *testing.T) {
	root, err := testguest.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := testguest.Paths(); err != nil {
		t.Fatal(err)
	}
	base := testguest.TempDir(t, "kemu-rfb-") // QEMU (uid 107) must traverse it
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	s := cmdserver.New(cmdserver.Options{SocketsDir: filepath.Join(base, "s"), Config: launcher.Config{
		Dir: filepath.Join(base, "run"), ImageCache: filepath.Join(base, "cache"), BaseDir: root, Accel: "tcg"}})
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	t.Cleanup(func() {
		if l := s.Launcher(); l != nil {
			kctx, kcancel := context.WithTimeout(context.Background(), time.Minute)
			defer kcancel()
			if _, err := l.Kill(kctx); err != nil {
				t.Errorf("kill: %v", err)
			}
		}
	})
	conn, err := grpc.NewClient("unix://"+s.Socket(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := rpc.NewLauncherClient(conn)
	vmi, err := yaml.YAMLToJSON([]byte(vmiYAML))
	if err != nil {
		t.Fatal(err)
	}
	if r, err := c.Sync(ctx, &rpc.SyncRequest{VmiJson: vmi}); err != nil || r.Domain.State != rpc.DomainState_Running {
		t.Fatalf("sync: %v %v", r, err)
	}

	// QEMU's VNC socket is QEMU's (107:107, group-only) in the runtime
	// directory only root and QEMU's group enter, like its other sockets.
	for _, f := range []struct {
		path     string
		uid, gid uint32
		perm     os.FileMode
	}{
		{filepath.Join(base, "run"), 0, unpriv.GID, 0o770},
		{filepath.Join(base, "run", launcher.VNCSocketName), unpriv.UID, unpriv.GID, 0o770},
	} {
		fi, err := os.Stat(f.path)
		if err != nil {
			t.Fatal(err)
		}
		st := fi.Sys().(*syscall.Stat_t)
		if st.Uid != f.uid || st.Gid != f.gid || fi.Mode().Perm() != f.perm {
			t.Errorf("%s: %d:%d %v, want %d:%d %v", f.path, st.Uid, st.Gid, fi.Mode().Perm(), f.uid, f.gid, f.perm)
		}
	}

	// The screen is black until the firmware writes to it, and changes
	// while the guest boots: poll until a screenshot is not blank and
	// matches QEMU's own dump taken right after it.
	dump := filepath.Join(base, "run", "screen.ppm")
	var img *image.RGBA
	var dumped *image.RGBA
	deadline := time.Now().Add(120 * time.Second)
	for {
		img = screenshot(ctx, t, c)
		dumped = screendump(ctx, t, s.Launcher(), dump)
		diff := differing(img, dumped)
		if diff >= 0 && diff*100 <= len(img.Pix)/4 && !blank(img) {
			t.Logf("screenshot %v: %d pixels differ from QEMU's screendump", img.Bounds().Size(), diff)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no screenshot that is not blank and matches QEMU's screen: last %v (blank %v), screendump %v, %d pixels differ",
				img.Bounds().Size(), blank(img), dumped.Bounds().Size(), diff)
		}
		time.Sleep(500 * time.Millisecond) // the guest draws meanwhile
	}
	var buf bytes.Buffer
	if err := rfb.WritePNG(&buf, img); err != nil {
		t.Fatal(err)
	}
	back, err := png.Decode(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatalf("the PNG does not decode: %v", err)
	}
	if back.Bounds() != img.Bounds() {
		t.Errorf("PNG %v, screenshot %v", back.Bounds(), img.Bounds())
	}

	// MaxVNCStreams at once: each gets QEMU's greeting; one more is refused.
	var open []io.ReadWriteCloser
	for i := range cmdserver.MaxVNCStreams {
		vc, err := rfb.DialLauncher(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		open = append(open, vc)
		greeting := make([]byte, 12)
		if _, err := io.ReadFull(vc, greeting); err != nil || string(greeting) != rfb.Version38 {
			t.Fatalf("stream %d: greeting %q, %v", i, greeting, err)
		}
	}
	extra, err := rfb.DialLauncher(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	_, err = extra.Read(make([]byte, 12))
	if status.Code(err) != codes.ResourceExhausted {
		t.Errorf("stream %d: %v, want ResourceExhausted", cmdserver.MaxVNCStreams+1, err)
	}
	extra.Close()
	for _, vc := range open {
		vc.Close()
	}
	// The slots are given back once the streams end.
	for {
		sctx, scancel := context.WithTimeout(ctx, 30*time.Second)
		vc, err := rfb.DialLauncher(sctx, c)
		if err == nil {
			_, err = rfb.Screenshot(sctx, vc)
			vc.Close()
		}
		scancel()
		if err == nil {
			break
		}
		if status.Code(err) != codes.ResourceExhausted || time.Now().After(deadline.Add(time.Minute)) {
			t.Fatalf("a screenshot after the streams closed: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func screenshot(ctx context.Context, t *testing.T, c rpc.LauncherClient) *image.RGBA {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	vc, err := rfb.DialLauncher(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	defer vc.Close()
	img, err := rfb.Screenshot(ctx, vc)
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	return img
}

// screendump has QEMU write its screen (binary PPM, P6) and reads it.
func screendump(ctx context.Context, t *testing.T, l *launcher.Launcher, path string) *image.RGBA {
	t.Helper()
	if err := l.Monitor().Execute(ctx, "screendump", map[string]any{"filename": path}, nil); err != nil {
		t.Fatalf("screendump: %v", err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r := bufio.NewReader(f)
	var w, h, maxVal int
	if _, err := fmt.Fscanf(r, "P6\n%d %d\n%d\n", &w, &h, &maxVal); err != nil || maxVal != 255 {
		t.Fatalf("screendump %s: header %dx%d max %d: %v", path, w, h, maxVal, err)
	}
	rgb := make([]byte, 3*w*h)
	if _, err := io.ReadFull(r, rgb); err != nil {
		t.Fatalf("screendump %s: %v", path, err)
	}
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for i := range w * h {
		copy(img.Pix[4*i:], rgb[3*i:3*i+3])
		img.Pix[4*i+3] = 0xff
	}
	return img
}

// differing counts the pixels that differ; -1 when the sizes differ.
func differing(a, b *image.RGBA) int {
	if a.Bounds() != b.Bounds() {
		return -1
	}
	n := 0
	for i := 0; i < len(a.Pix); i += 4 {
		if !bytes.Equal(a.Pix[i:i+4], b.Pix[i:i+4]) {
			n++
		}
	}
	return n
}

// blank says whether every pixel has one colour.
func blank(img *image.RGBA) bool {
	first := img.Pix[:4]
	for i := 4; i < len(img.Pix); i += 4 {
		if !bytes.Equal(img.Pix[i:i+4], first) {
			return false
		}
	}
	return true
}
