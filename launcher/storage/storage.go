// Package storage prepares every volume of a VMI before QEMU starts, with
// KubeVirt's semantics:
//
//   - containerDisk: the image's disk (qcow2 or raw, detected by qemu-img,
//     never by name; images with a backing or external data file are refused)
//     is extracted once into the image cache, read-only (0444), and used
//     through a qcow2 overlay <Dir>/<volume>.qcow2 (written by kemu,
//     qcow2.go) that lives and dies with the VM. The cached base is never
//     written.
//   - emptyDisk: a qcow2 of the capacity (rounded up to 512 bytes) at
//     <Dir>/<volume>.qcow2, removed with the VM.
//   - hostDisk: Disk must exist. DiskOrCreate creates a sparse raw file of
//     the capacity (rounded up to 512 bytes) and its parent directories when
//     missing; an existing regular file smaller than the capacity is grown
//     (sparse, never shrunk: KubeVirt's disk expansion) once every volume is
//     ready. Raw. Never removed by Cleanup; what Prepare created is removed
//     only if Prepare fails.
//   - persistentVolumeClaim: a block device <PVCRoot>/<claimName>, or the raw
//     file <PVCRoot>/<claimName>/disk.img; readOnly from the claim.
//   - ephemeral: the claim found as for persistentVolumeClaim (mounted
//     read-only) is the raw base of a qcow2 overlay <Dir>/<volume>.qcow2
//     (as a containerDisk's) that lives and dies with the VM; the claim is
//     never written.
//   - cloudInitNoCloud: a "cidata" ISO at <Dir>/<volume>-cidata.iso with
//     instance-id = the VMI's UID (else <namespace>.<name>, namespace
//     "default" when empty) and local-hostname = v1alpha1.VMIHostname
//     (spec.hostname, else the VMI's name up to its first dot, at most 63);
//     read-only.
//   - cloudInitConfigDrive: a "config-2" ISO (OpenStack config drive:
//     openstack/latest/meta_data.json with uuid and hostname, user_data,
//     network_data.json) at <Dir>/<volume>-config-2.iso; read-only.
//   - configMap, secret, serviceAccount, downwardAPI, sysprep: the directory
//     the kubelet mounted at <ConfigDir>/<volume>/ as an ISO image
//     (launcher/configdisk) at <Dir>/<volume>-<kind>.iso, labelled
//     volumeLabel or "cfgdata" (sysprep: "unattendCD", and it must hold
//     autounattend.xml or unattend.xml); read-only; the content is the
//     source's when the VM started (KubeVirt's rule).
//   - a lun disk's volume must be a block-mode claim whose device speaks
//     SCSI (SG_GET_VERSION_NUM: ProbeSCSI), else Prepare fails naming
//     spec.domain.devices.disks[i].lun.
//   - downwardMetrics: the vhostmd disk <Dir>/vhostmd0 (launcher/downwardmetrics,
//     256 KiB, one for all such volumes), read-only to QEMU; the launcher
//     refreshes its metrics while the VM runs.
//   - firmware.kernelBoot.container: kernel and initrd extracted into the
//     image cache.
//   - a volume that domain.devices.filesystems shares is no disk: Prepared
//     .Shares has its directory (shares.go), a file-system claim's mount or
//     a config volume's, read-only ones on a read-only mount.
//
// Every volume also says whether its files can be opened with O_DIRECT and
// whether it is preallocated: the facts behind a disk's default cache and
// io modes (v1alpha1.DiskCache, DefaultDiskIO), which the command line
// applies.
//
// Whether the guest sees a disk read-only is the command line's decision
// (disk/cdrom readonly); Volume.ReadOnly only says that the source must not
// be written (cloud-init ISO, read-only claim).
package storage

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"

	"github.com/kemu-dev/kemu/api/v1alpha1"
	"github.com/kemu-dev/kemu/launcher/cloudinit"
	"github.com/kemu-dev/kemu/launcher/configdisk"
	"github.com/kemu-dev/kemu/launcher/downwardmetrics"
	"github.com/kemu-dev/kemu/launcher/images"
)

// Volume kinds.
const (
	KindContainerDisk         = "containerDisk"
	KindCloudInitNoCloud      = "cloudInitNoCloud"
	KindEmptyDisk             = "emptyDisk"
	KindHostDisk              = "hostDisk"
	KindPersistentVolumeClaim = "persistentVolumeClaim"
	KindCloudInitConfigDrive  = "cloudInitConfigDrive"
	KindConfigMap             = "configMap"
	KindSecret                = "secret"
	KindServiceAccount        = "serviceAccount"
	KindDownwardAPI           = "downwardAPI"
	KindSysprep               = "sysprep"
	KindEphemeral             = "ephemeral"
	KindDataVolume            = "dataVolume"
	KindDownwardMetrics       = "downwardMetrics"
)

// DownwardMetricsDisk is the downward metrics disk's file in the VM's
// directory (KubeVirt's name): one for every downwardMetrics volume.
const DownwardMetricsDisk = "vhostmd0"

// Disk formats.
const (
	FormatRaw   = "raw"
	FormatQCOW2 = "qcow2"
)

// PVCDiskImage is the disk file of a file-system claim.
const PVCDiskImage = "disk.img"

// Options says where things are.
type Options struct {
	// Dir is the VM's private directory (it must exist): overlays, ISOs and
	// emptyDisks live here.
	Dir string
	// Images resolves containerDisk and kernelBoot images.
	Images *images.Store
	// ContainerDiskDir, when set, holds the containerDisks the launcher
	// Pod's init containers copied out of their images (kemu-copy):
	// <ContainerDiskDir>/<volume name>/<file>; or, with ImagesMounted, each
	// image itself: <ContainerDiskDir>/<volume name>/ is its root. They are
	// used from there instead of Images.
	ContainerDiskDir string
	// KernelBootDir, when set, holds firmware.kernelBoot.container's kernel
	// and initrd copied out of the image by an init container:
	// <KernelBootDir>/<base name of kernelPath, initrdPath>; or, with
	// ImagesMounted, the image itself, its root.
	KernelBootDir string
	// ImagesMounted says that ContainerDiskDir's and KernelBootDir's images
	// are mounted by the kubelet (Kubernetes image volumes), not copied:
	// paths are resolved inside each image (mounted.go).
	ImagesMounted bool
	// PVCRoot holds the claims: <PVCRoot>/<claimName>/disk.img, or the block
	// device <PVCRoot>/<claimName>.
	PVCRoot string
	// SecretsDir holds cloud-init secrets: <SecretsDir>/<secretName>/<key>.
	SecretsDir string
	// ConfigDir holds the config volumes (configMap, secret,
	// serviceAccount, downwardAPI, sysprep) as the kubelet mounted them:
	// <ConfigDir>/<volume name>/. "": no such volume can be used.
	ConfigDir string
	// MountInfo is the launcher container's mount table, which a
	// containerPath must be a mount of ("" = DefaultMountInfo).
	MountInfo string
	// QemuImg is the qemu-img binary ("" = qemu-img from PATH).
	QemuImg string
}

// Volume is a prepared volume, ready to be opened by QEMU.
type Volume struct {
	Name     string
	Kind     string // KindContainerDisk, ...
	Path     string
	Format   string // FormatRaw or FormatQCOW2: what QEMU should open Path as
	ReadOnly bool   // the source must not be written
	Block    bool   // Path is a host block device
	Size     int64  // virtual size, bytes
	// DirectIO says that Path, and Base under an overlay, can be opened
	// with O_DIRECT: the disk may run with cache none (DirectIO).
	DirectIO bool
	// Preallocated says that Path is a file with every byte allocated
	// (Preallocated): with cache none, native I/O is the default.
	Preallocated bool

	// containerDisk and ephemeral only: the read-only image under the
	// overlay (the overlay's backing file: the cached containerDisk image,
	// the claim), its format, and whether it is a block device (a
	// block-mode claim, which QEMU's device cgroup must allow).
	Base       string
	BaseFormat string
	BaseBlock  bool
}

// KernelBoot holds the files of firmware.kernelBoot.container (either may be
// empty when the VMI names no such path).
type KernelBoot struct{ Kernel, Initrd string }

// Prepared is what Prepare made.
type Prepared struct {
	Volumes map[string]Volume // by volume name: the disks
	// Shares are the volumes shared as filesystems, by volume name.
	Shares map[string]Share
	Kernel *KernelBoot

	mu    sync.Mutex
	owned []string // files that live and die with the VM
	// checks are qemu-img's verdicts on the containerDisks' images,
	// coming while QEMU starts (Verify).
	checks []<-chan error
}

// Verify waits for qemu-img's verdict on every containerDisk image. To
// start QEMU without waiting for an exec of qemu-img, Prepare reads the
// images' headers itself (probeImage) and runs `qemu-img info` at the same
// time; Verify returns its verdict: the same format and size, and no
// backing or external data file, else a *FieldError naming the volume.
// The guest must not run before Verify returned nil: the launcher calls it
// before it resumes the guest (or hands a migration target over).
func (p *Prepared) Verify(ctx context.Context) error {
	if p == nil {
		return nil
	}
	for _, c := range p.checks {
		select {
		case err := <-c:
			if err != nil {
				return err
			}
		case <-ctx.Done():
			return fmt.Errorf("storage: waiting for qemu-img: %w", ctx.Err())
		}
	}
	p.checks = nil
	return nil
}

// FieldError is an error caused by one field of the VMI.
type FieldError struct {
	Field string // e.g. spec.volumes[1].hostDisk.path
	Err   error
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Err.Error() }
func (e *FieldError) Unwrap() error { return e.Err }

func fieldErr(field string, format string, args ...any) error {
	return &FieldError{Field: field, Err: fmt.Errorf(format, args...)}
}

// Prepare makes every volume of vmi ready. On error it removes whatever it
// created and returns a *FieldError naming the VMI field at fault.
func Prepare(ctx context.Context, vmi *v1alpha1.VirtualMachineInstance, opts Options) (_ *Prepared, err error) {
	if vmi == nil {
		return nil, errors.New("storage: no VMI")
	}
	if opts.Dir == "" {
		return nil, errors.New("storage: no VM directory")
	}
	if st, err := os.Stat(opts.Dir); err != nil {
		return nil, fmt.Errorf("storage: VM directory: %w", err)
	} else if !st.IsDir() {
		return nil, fmt.Errorf("storage: VM directory %s is not a directory", opts.Dir)
	}
	pr := &preparer{
		opts: opts,
		vmi:  vmi,
		qemu: qemuImg{bin: opts.QemuImg},
		p:    &Prepared{Volumes: map[string]Volume{}, Shares: map[string]Share{}},
	}
	defer func() {
		if err != nil {
			pr.rollback()
		}
	}()
	seen := map[string]int{}
	shared := v1alpha1.FilesystemNames(&vmi.Spec)
	for i := range vmi.Spec.Volumes {
		v := &vmi.Spec.Volumes[i]
		field := fmt.Sprintf("spec.volumes[%d]", i)
		if err := checkName(v.Name); err != nil {
			return nil, &FieldError{Field: field + ".name", Err: err}
		}
		if j, dup := seen[v.Name]; dup {
			return nil, fieldErr(field+".name", "volume name %q is already used by spec.volumes[%d]", v.Name, j)
		}
		seen[v.Name] = i
		if shared[v.Name] {
			sh, err := pr.share(v, field)
			if err != nil {
				return nil, err
			}
			pr.p.Shares[v.Name] = sh
			continue
		}
		vol, err := pr.volume(ctx, v, field)
		if err != nil {
			return nil, err
		}
		vol.Name = v.Name
		pr.p.Volumes[v.Name] = vol
	}
	if err := pr.luns(); err != nil {
		return nil, err
	}
	if err := pr.kernelBoot(ctx); err != nil {
		return nil, err
	}
	for _, g := range pr.grow {
		if err := os.Truncate(g.path, g.size); err != nil {
			return nil, fieldErr(g.field, "grow %s to %d bytes: %w", g.path, g.size, err)
		}
		v := pr.p.Volumes[g.volume]
		v.Size = g.size
		pr.p.Volumes[g.volume] = v
	}
	for name, v := range pr.p.Volumes {
		v.DirectIO = DirectIO(v.Path) && (v.Base == "" || DirectIO(v.Base))
		v.Preallocated = Preallocated(v.Path, v.Size)
		pr.p.Volumes[name] = v
	}
	return pr.p, nil
}

// Cleanup removes what Prepare created for this VM: overlays (of
// containerDisks and ephemeral volumes), ISOs and emptyDisks; never
// hostDisks, claims or the image cache. Idempotent.
func (p *Prepared) Cleanup() error {
	if p == nil {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	var errs []error
	for i := len(p.owned) - 1; i >= 0; i-- {
		if err := os.Remove(p.owned[i]); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Files lists the files Cleanup removes.
func (p *Prepared) Files() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.owned...)
}

type growth struct {
	volume, field, path string
	size                int64
}

type preparer struct {
	opts Options
	vmi  *v1alpha1.VirtualMachineInstance
	qemu qemuImg
	p    *Prepared

	// Undone only on failure: hostDisk files and directories created.
	createdFiles []string
	createdDirs  []string // outermost last
	grow         []growth

	downwardMetricsMade bool // <Dir>/vhostmd0 exists
}

func (pr *preparer) own(path string) {
	pr.p.mu.Lock()
	pr.p.owned = append(pr.p.owned, path)
	pr.p.mu.Unlock()
}

func (pr *preparer) rollback() {
	_ = pr.p.Cleanup()
	for i := len(pr.createdFiles) - 1; i >= 0; i-- {
		_ = os.Remove(pr.createdFiles[i])
	}
	for _, d := range pr.createdDirs { // innermost first
		_ = os.Remove(d) // only if empty
	}
}

func checkName(name string) error {
	switch {
	case name == "":
		return errors.New("empty volume name")
	case name == "." || name == ".." || strings.ContainsAny(name, "/\x00"):
		return fmt.Errorf("invalid volume name %q", name)
	case len(name) > 200:
		return fmt.Errorf("volume name %q is too long", name)
	}
	return nil
}

func (pr *preparer) volume(ctx context.Context, v *v1alpha1.Volume, field string) (Volume, error) {
	switch {
	case v.ContainerDisk != nil:
		return pr.containerDisk(ctx, v, field+".containerDisk")
	case v.EmptyDisk != nil:
		return pr.emptyDisk(v, field+".emptyDisk")
	case v.HostDisk != nil:
		return pr.hostDisk(v, field+".hostDisk")
	case v.PersistentVolumeClaim != nil:
		return pr.pvc(v, field+".persistentVolumeClaim")
	case v.DataVolume != nil:
		return pr.dataVolume(v, field+".dataVolume")
	case v.Ephemeral != nil && v.Ephemeral.PersistentVolumeClaim != nil:
		return pr.ephemeral(v, field+".ephemeral.persistentVolumeClaim")
	case v.CloudInitNoCloud != nil:
		return pr.cloudInit(v, field+".cloudInitNoCloud")
	case v.CloudInitConfigDrive != nil:
		return pr.configDrive(v, field+".cloudInitConfigDrive")
	case v.ConfigMap != nil:
		return pr.configVolume(v, field+".configMap", KindConfigMap, v.ConfigMap.VolumeLabel)
	case v.Secret != nil:
		return pr.configVolume(v, field+".secret", KindSecret, v.Secret.VolumeLabel)
	case v.ServiceAccount != nil:
		return pr.configVolume(v, field+".serviceAccount", KindServiceAccount, "")
	case v.DownwardAPI != nil:
		return pr.configVolume(v, field+".downwardAPI", KindDownwardAPI, v.DownwardAPI.VolumeLabel)
	case v.Sysprep != nil:
		return pr.configVolume(v, field+".sysprep", KindSysprep, configdisk.SysprepLabel)
	case v.DownwardMetrics != nil:
		return pr.downwardMetrics(field + ".downwardMetrics")
	default:
		return Volume{}, fieldErr(field, "volume %q has no supported source (containerDisk, cloudInitNoCloud, cloudInitConfigDrive, "+
			"emptyDisk, hostDisk, persistentVolumeClaim, ephemeral, configMap, secret, serviceAccount, downwardAPI, sysprep, downwardMetrics)", v.Name)
	}
}

// vmFile is a file of the VM's directory; a stale one (from a launcher that
// died) is removed first. It is owned from now on, so a failure half-way
// through its creation leaves nothing behind.
func (pr *preparer) vmFile(name string) (string, error) {
	p := filepath.Join(pr.opts.Dir, name)
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", err
	}
	pr.own(p)
	return p, nil
}

func (pr *preparer) containerDisk(ctx context.Context, v *v1alpha1.Volume, field string) (Volume, error) {
	cd := v.ContainerDisk
	var base string
	var err error
	switch {
	case pr.opts.ContainerDiskDir != "":
		find := copiedDisk
		if pr.opts.ImagesMounted {
			find = mountedDisk
		}
		if base, err = find(filepath.Join(pr.opts.ContainerDiskDir, v.Name), cd.Path); err != nil {
			f := field + ".image"
			if cd.Path != "" {
				f = field + ".path"
			}
			return Volume{}, &FieldError{Field: f, Err: err}
		}
	case pr.opts.Images == nil:
		return Volume{}, fieldErr(field+".image", "no image store configured")
	default:
		if base, err = pr.opts.Images.DiskFile(ctx, cd.Image, cd.ImagePullPolicy, cd.Path); err != nil {
			f := field + ".image"
			if cd.Path != "" && errors.Is(err, images.ErrNotFound) {
				f = field + ".path"
			}
			return Volume{}, &FieldError{Field: f, Err: err}
		}
	}
	info, err := probeImage(base)
	if err != nil {
		return Volume{}, fieldErr(field+".image", "image %q: disk %s: %w", cd.Image, base, err)
	}
	if err := info.checkBase(); err != nil {
		return Volume{}, fieldErr(field+".image", "image %q: disk %s: %w", cd.Image, base, err)
	}
	pr.verify(ctx, field+".image", cd.Image, base, info)
	overlay, err := pr.vmFile(v.Name + ".qcow2")
	if err != nil {
		return Volume{}, fieldErr(field, "%w", err)
	}
	if err := writeQCOW2(overlay, info.VirtualSize, base, info.Format); err != nil {
		return Volume{}, fieldErr(field, "overlay for image %q: %w", cd.Image, err)
	}
	return Volume{Kind: KindContainerDisk, Path: overlay, Format: FormatQCOW2, Size: info.VirtualSize,
		Base: base, BaseFormat: info.Format}, nil
}

// verify runs qemu-img info on a containerDisk image the launcher probed
// itself, in the background; Prepared.Verify collects the verdict.
func (pr *preparer) verify(ctx context.Context, field, image, path string, probed *imageInfo) {
	c := make(chan error, 1)
	pr.p.checks = append(pr.p.checks, c)
	go func() {
		info, err := pr.qemu.info(ctx, path)
		switch {
		case err != nil:
			err = fieldErr(field, "image %q: %w", image, err)
		case info.checkBase() != nil:
			err = fieldErr(field, "image %q: disk %s: %w", image, path, info.checkBase())
		case info.Format != probed.Format || info.VirtualSize != probed.VirtualSize:
			err = fieldErr(field, "image %q: disk %s: qemu-img reads it as %s of %d bytes, not %s of %d bytes",
				image, path, info.Format, info.VirtualSize, probed.Format, probed.VirtualSize)
		}
		c <- err
	}()
}

// copiedDisk finds the disk an init container copied into dir: the file
// named like path's last element, or without path the only file there (the
// image's /disk/ held exactly one).
func copiedDisk(dir, path string) (string, error) {
	if path != "" {
		p := filepath.Join(dir, filepath.Base(path))
		if fi, err := os.Stat(p); err != nil || !fi.Mode().IsRegular() {
			return "", fmt.Errorf("%s was not copied out of the image (no file %s): %w", path, p, images.ErrNotFound)
		}
		return p, nil
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return "", fmt.Errorf("no disk copied out of the image: %w", err)
	}
	var files []string
	for _, e := range entries {
		if e.Type().IsRegular() && !strings.HasPrefix(e.Name(), ".") {
			files = append(files, filepath.Join(dir, e.Name()))
		}
	}
	switch len(files) {
	case 1:
		return files[0], nil
	case 0:
		return "", fmt.Errorf("no disk copied out of the image's /disk/ into %s: %w", dir, images.ErrNotFound)
	}
	return "", fmt.Errorf("the image's /disk/ holds %d files: set path to choose one", len(files))
}

func roundUp512(n int64) int64 { return (n + 511) &^ 511 }

func (pr *preparer) emptyDisk(v *v1alpha1.Volume, field string) (Volume, error) {
	size := v.EmptyDisk.Capacity.Value()
	if size <= 0 {
		return Volume{}, fieldErr(field+".capacity", "must be positive, not %s", v.EmptyDisk.Capacity.String())
	}
	size = roundUp512(size)
	p, err := pr.vmFile(v.Name + ".qcow2")
	if err != nil {
		return Volume{}, fieldErr(field, "%w", err)
	}
	if err := writeQCOW2(p, size, "", ""); err != nil {
		return Volume{}, fieldErr(field, "%w", err)
	}
	return Volume{Kind: KindEmptyDisk, Path: p, Format: FormatQCOW2, Size: size}, nil
}

func (pr *preparer) hostDisk(v *v1alpha1.Volume, field string) (Volume, error) {
	hd := v.HostDisk
	if hd.Path == "" {
		return Volume{}, fieldErr(field+".path", "required")
	}
	if !filepath.IsAbs(hd.Path) {
		return Volume{}, fieldErr(field+".path", "%q is not an absolute path", hd.Path)
	}
	path := filepath.Clean(hd.Path)
	var capacity int64
	if hd.Capacity != nil {
		if capacity = hd.Capacity.Value(); capacity <= 0 {
			return Volume{}, fieldErr(field+".capacity", "must be positive, not %s", hd.Capacity.String())
		}
		capacity = roundUp512(capacity)
	}
	st, err := os.Stat(path)
	missing := errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR)
	switch hd.Type {
	case v1alpha1.HostDiskExists:
		if missing {
			return Volume{}, fieldErr(field+".path", "%s does not exist (type Disk needs an existing disk image; DiskOrCreate creates one)", path)
		}
	case v1alpha1.HostDiskExistsOrCreate:
		if missing {
			if hd.Capacity == nil {
				return Volume{}, fieldErr(field+".capacity", "required: %s does not exist and type DiskOrCreate creates it with this size", path)
			}
			if err := pr.createSparse(path, capacity); err != nil {
				return Volume{}, fieldErr(field+".path", "create %s: %w", path, err)
			}
			return Volume{Kind: KindHostDisk, Path: path, Format: FormatRaw, Size: capacity}, nil
		}
	default:
		return Volume{}, fieldErr(field+".type", "unknown type %q (Disk or DiskOrCreate)", hd.Type)
	}
	if err != nil {
		return Volume{}, fieldErr(field+".path", "%w", err)
	}
	vol := Volume{Kind: KindHostDisk, Path: path, Format: FormatRaw}
	switch {
	case st.Mode().IsRegular():
		vol.Size = st.Size()
		if hd.Type == v1alpha1.HostDiskExistsOrCreate && hd.Capacity != nil && st.Size() < capacity {
			pr.grow = append(pr.grow, growth{volume: v.Name, field: field + ".capacity", path: path, size: capacity})
		}
	case st.Mode()&fs.ModeDevice != 0 && st.Mode()&fs.ModeCharDevice == 0:
		vol.Block = true
		if vol.Size, err = deviceSize(path); err != nil {
			return Volume{}, fieldErr(field+".path", "%w", err)
		}
	case st.IsDir():
		return Volume{}, fieldErr(field+".path", "%s is a directory, not a disk image", path)
	default:
		return Volume{}, fieldErr(field+".path", "%s is not a regular file or block device (%v)", path, st.Mode().Type())
	}
	return vol, nil
}

// createSparse creates path (and its missing parents) as a sparse file of
// size bytes, remembering what to remove should Prepare fail.
func (pr *preparer) createSparse(path string, size int64) error {
	var missing []string
	for d := filepath.Dir(path); ; d = filepath.Dir(d) {
		if _, err := os.Lstat(d); err == nil {
			break
		} else if !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		missing = append(missing, d) // innermost first
		if filepath.Dir(d) == d {
			break
		}
	}
	for i := len(missing) - 1; i >= 0; i-- {
		if err := os.Mkdir(missing[i], 0o755); err != nil {
			if errors.Is(err, fs.ErrExist) {
				continue
			}
			return err
		}
		pr.createdDirs = append([]string{missing[i]}, pr.createdDirs...)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o660)
	if err != nil {
		return err
	}
	pr.createdFiles = append(pr.createdFiles, path)
	if err := f.Truncate(size); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func deviceSize(path string) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	return f.Seek(0, io.SeekEnd)
}

func (pr *preparer) pvc(v *v1alpha1.Volume, field string) (Volume, error) {
	c := v.PersistentVolumeClaim
	vol, err := pr.claim(c.ClaimName, field+".claimName")
	if err != nil {
		return Volume{}, err
	}
	vol.Kind, vol.ReadOnly = KindPersistentVolumeClaim, c.ReadOnly
	return vol, nil
}

// dataVolume is the PVC of the DataVolume's name, read-write, found as a
// persistentVolumeClaim's (KubeVirt's rule: a DataVolume and its PVC share
// the name).
func (pr *preparer) dataVolume(v *v1alpha1.Volume, field string) (Volume, error) {
	vol, err := pr.claim(v.DataVolume.Name, field+".name")
	if err != nil {
		return Volume{}, err
	}
	vol.Kind = KindDataVolume
	return vol, nil
}

// ephemeral puts a qcow2 overlay in the VM's directory over the claim,
// which it reads as raw (KubeVirt's ephemeral disks).
func (pr *preparer) ephemeral(v *v1alpha1.Volume, field string) (Volume, error) {
	c := v.Ephemeral.PersistentVolumeClaim
	base, err := pr.claim(c.ClaimName, field+".claimName")
	if err != nil {
		return Volume{}, err
	}
	overlay, err := pr.vmFile(v.Name + ".qcow2")
	if err != nil {
		return Volume{}, fieldErr(field, "%w", err)
	}
	if err := writeQCOW2(overlay, base.Size, base.Path, FormatRaw); err != nil {
		return Volume{}, fieldErr(field, "overlay for claim %q: %w", c.ClaimName, err)
	}
	return Volume{Kind: KindEphemeral, Path: overlay, Format: FormatQCOW2, Size: roundUp512(base.Size),
		Base: base.Path, BaseFormat: FormatRaw, BaseBlock: base.Block}, nil
}

// claim finds a claim: the block device <PVCRoot>/<claim>, or the raw file
// <PVCRoot>/<claim>/disk.img. Errors name field, the claimName.
func (pr *preparer) claim(claim, f string) (Volume, error) {
	if err := checkName(claim); err != nil {
		return Volume{}, fieldErr(f, "invalid claim name %q", claim)
	}
	if pr.opts.PVCRoot == "" {
		return Volume{}, fieldErr(f, "claim %q: no claim directory configured", claim)
	}
	root := filepath.Join(pr.opts.PVCRoot, claim)
	vol := Volume{Format: FormatRaw}
	st, err := os.Stat(root)
	if errors.Is(err, fs.ErrNotExist) {
		return Volume{}, fieldErr(f, "claim %q not found: no block device or directory %s", claim, root)
	}
	if err != nil {
		return Volume{}, fieldErr(f, "claim %q: %w", claim, err)
	}
	switch {
	case st.Mode()&fs.ModeDevice != 0 && st.Mode()&fs.ModeCharDevice == 0:
		vol.Path, vol.Block = root, true
		if vol.Size, err = deviceSize(root); err != nil {
			return Volume{}, fieldErr(f, "claim %q: %w", claim, err)
		}
	case st.IsDir():
		vol.Path = filepath.Join(root, PVCDiskImage)
		ist, err := os.Stat(vol.Path)
		if errors.Is(err, fs.ErrNotExist) {
			return Volume{}, fieldErr(f, "claim %q has no %s (looked for %s)", claim, PVCDiskImage, vol.Path)
		}
		if err != nil {
			return Volume{}, fieldErr(f, "claim %q: %w", claim, err)
		}
		if !ist.Mode().IsRegular() {
			return Volume{}, fieldErr(f, "claim %q: %s is not a regular file", claim, vol.Path)
		}
		vol.Size = ist.Size()
	default:
		return Volume{}, fieldErr(f, "claim %q: %s is neither a block device nor a directory", claim, root)
	}
	return vol, nil
}

// InstanceID is the cloud-init instance-id of a VMI: its UID, else
// <namespace>.<name> (namespace "default" when empty).
func InstanceID(vmi *v1alpha1.VirtualMachineInstance) string {
	if vmi.UID != "" {
		return string(vmi.UID)
	}
	ns := vmi.Namespace
	if ns == "" {
		ns = "default"
	}
	return ns + "." + vmi.Name
}

func (pr *preparer) cloudInit(v *v1alpha1.Volume, field string) (Volume, error) {
	// local-hostname: the host name the launcher Pod and the DHCP lease give too.
	data, err := cloudinit.Resolve(v.CloudInitNoCloud, pr.opts.SecretsDir, InstanceID(pr.vmi), v1alpha1.VMIHostname(pr.vmi))
	if err != nil {
		var fe *cloudinit.FieldError
		if errors.As(err, &fe) {
			f := field
			if fe.Field != "" {
				f += "." + fe.Field
			}
			return Volume{}, &FieldError{Field: f, Err: fe.Err}
		}
		return Volume{}, &FieldError{Field: field, Err: err}
	}
	p, err := pr.vmFile(v.Name + "-cidata.iso")
	if err != nil {
		return Volume{}, fieldErr(field, "%w", err)
	}
	if err := cloudinit.NoCloudISO(p, data); err != nil {
		return Volume{}, fieldErr(field, "%w", err)
	}
	st, err := os.Stat(p)
	if err != nil {
		return Volume{}, fieldErr(field, "%w", err)
	}
	return Volume{Kind: KindCloudInitNoCloud, Path: p, Format: FormatRaw, ReadOnly: true, Size: st.Size()}, nil
}

// downwardMetrics makes the vhostmd disk <Dir>/vhostmd0 with an empty
// metrics document (downwardmetrics.Create), once for all the VMI's
// downwardMetrics volumes; the launcher refreshes it while the VM runs.
// QEMU opens it read-only.
func (pr *preparer) downwardMetrics(field string) (Volume, error) {
	p := filepath.Join(pr.opts.Dir, DownwardMetricsDisk)
	if pr.downwardMetricsMade {
		return Volume{Kind: KindDownwardMetrics, Path: p, Format: FormatRaw, ReadOnly: true, Size: downwardmetrics.DiskSize}, nil
	}
	p, err := pr.vmFile(DownwardMetricsDisk)
	if err != nil {
		return Volume{}, fieldErr(field, "%w", err)
	}
	if err := downwardmetrics.Create(p); err != nil {
		return Volume{}, fieldErr(field, "%w", err)
	}
	pr.downwardMetricsMade = true
	return Volume{Kind: KindDownwardMetrics, Path: p, Format: FormatRaw, ReadOnly: true, Size: downwardmetrics.DiskSize}, nil
}

// configDrive builds an OpenStack config drive ("config-2" ISO) as KubeVirt
// does: openstack/latest/{meta_data.json,user_data,network_data.json}.
func (pr *preparer) configDrive(v *v1alpha1.Volume, field string) (Volume, error) {
	src := v1alpha1.CloudInitNoCloudSource(*v.CloudInitConfigDrive)
	hostname := v1alpha1.VMIHostname(pr.vmi)
	data, err := cloudinit.Resolve(&src, pr.opts.SecretsDir, InstanceID(pr.vmi), hostname)
	if err != nil {
		var fe *cloudinit.FieldError
		if errors.As(err, &fe) && fe.Field != "" {
			return Volume{}, &FieldError{Field: field + "." + fe.Field, Err: fe.Err}
		}
		return Volume{}, &FieldError{Field: field, Err: err}
	}
	p, err := pr.vmFile(v.Name + "-config-2.iso")
	if err != nil {
		return Volume{}, fieldErr(field, "%w", err)
	}
	files, err := cloudinit.ConfigDriveFiles(data, InstanceID(pr.vmi), hostname)
	if err != nil {
		return Volume{}, fieldErr(field, "%w", err)
	}
	if err := configdisk.FromFiles(p, cloudinit.ConfigDriveLabel, files, pr.opts.Dir); err != nil {
		return Volume{}, fieldErr(field, "%w", err)
	}
	return pr.isoVolume(KindCloudInitConfigDrive, p, field)
}

// configVolume turns the directory the kubelet mounted for a config volume
// into an ISO image labelled label (configdisk.DefaultLabel when empty).
func (pr *preparer) configVolume(v *v1alpha1.Volume, field, kind, label string) (Volume, error) {
	if pr.opts.ConfigDir == "" {
		return Volume{}, fieldErr(field, "a %s volume is mounted by the kubelet into the launcher Pod: it needs a cluster (not kemuctl run)", kind)
	}
	if label == "" {
		label = configdisk.DefaultLabel
	}
	src := filepath.Join(pr.opts.ConfigDir, v.Name)
	if st, err := os.Stat(src); err != nil || !st.IsDir() {
		return Volume{}, fieldErr(field, "the launcher Pod has no mount of volume %q at %s", v.Name, src)
	}
	if kind == KindSysprep {
		if err := unattendPresent(src); err != nil {
			return Volume{}, &FieldError{Field: field, Err: err}
		}
	}
	p, err := pr.vmFile(v.Name + "-" + strings.ToLower(kind) + ".iso")
	if err != nil {
		return Volume{}, fieldErr(field, "%w", err)
	}
	if err := configdisk.FromDir(p, label, src, pr.opts.Dir); err != nil {
		return Volume{}, fieldErr(field, "%w", err)
	}
	return pr.isoVolume(kind, p, field)
}

func (pr *preparer) isoVolume(kind, p, field string) (Volume, error) {
	st, err := os.Stat(p)
	if err != nil {
		return Volume{}, fieldErr(field, "%w", err)
	}
	return Volume{Kind: kind, Path: p, Format: FormatRaw, ReadOnly: true, Size: st.Size()}, nil
}

// Windows Setup's answer files; a sysprep volume holds one of them
// (compared case-insensitively, as KubeVirt).
var unattendFiles = []string{"autounattend.xml", "unattend.xml"}

func unattendPresent(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if slices.Contains(unattendFiles, strings.ToLower(e.Name())) {
			return nil
		}
	}
	return fmt.Errorf("the sysprep source holds neither %s", strings.Join(unattendFiles, " nor "))
}

func (pr *preparer) kernelBoot(ctx context.Context) error {
	fw := pr.vmi.Spec.Domain.Firmware
	if fw == nil || fw.KernelBoot == nil || fw.KernelBoot.Container == nil {
		return nil
	}
	c := fw.KernelBoot.Container
	field := "spec.domain.firmware.kernelBoot.container"
	if pr.opts.Images == nil && pr.opts.KernelBootDir == "" {
		return fieldErr(field+".image", "no image store configured")
	}
	kb := &KernelBoot{}
	for _, f := range []struct {
		name, path string
		dst        *string
	}{{"kernelPath", c.KernelPath, &kb.Kernel}, {"initrdPath", c.InitrdPath, &kb.Initrd}} {
		if f.path == "" {
			continue
		}
		if pr.opts.KernelBootDir != "" && pr.opts.ImagesMounted {
			p, err := mountedFile(pr.opts.KernelBootDir, f.path)
			if err != nil {
				return fieldErr(field+"."+f.name, "%w", err)
			}
			*f.dst = p
			continue
		}
		if pr.opts.KernelBootDir != "" {
			p := filepath.Join(pr.opts.KernelBootDir, filepath.Base(f.path))
			if fi, err := os.Stat(p); err != nil || !fi.Mode().IsRegular() {
				return fieldErr(field+"."+f.name, "%s was not copied out of the image (no file %s): %w", f.path, p, images.ErrNotFound)
			}
			*f.dst = p
			continue
		}
		p, err := pr.opts.Images.File(ctx, c.Image, c.ImagePullPolicy, f.path)
		if err != nil {
			fld := field + ".image"
			if errors.Is(err, images.ErrNotFound) {
				fld = field + "." + f.name
			}
			return &FieldError{Field: fld, Err: err}
		}
		*f.dst = p
	}
	pr.p.Kernel = kb
	return nil
}
