// Package cmdline turns a VMI, the node's facts and the launcher's prepared
// inputs into a QEMU (7.2, x86_64) command line: Build is a pure function,
// no files are touched and no process is started.
//
// # Structure
//
// Each QEMU device or option is a small type implementing Device, which
// renders its own arguments (the kata-containers govmm idea): Machine, CPU,
// SMP, Memory, Kernel, Name, UUID, SMBIOSSystem, Sandbox, MsgTimestamps,
// Boot, Global, Incoming (device.go, machine.go); SocketChardev, QMPMonitor,
// SerialPort, VirtioSerial, VirtSerialPort (chardev.go); BlockFile,
// BlockFormat, VirtioBlk, SCSIController, SCSIDisk, IDEDisk, IOThread (block.go);
// NetdevTap, NetdevUser, NetDevice (net.go); RNG, Balloon. Build
// (build*.go) maps the VMI onto them and reports errors with the VMI field
// (spec.…) or input (Input.…, Paths.…, Facts.…) at fault.
//
// # Escaping
//
// Option lists ("driver,key=value,…") go through one function, Escape:
// commas are doubled (QemuOpts and keyval both read ",," as a comma), and
// values QEMU cannot take faithfully — control characters such as newline
// or NUL, invalid UTF-8 — are refused. Whole arguments that are not option
// lists are not escaped, only checked (CheckArg): -kernel, -initrd and
// -append (QEMU takes them as they are; a comma in the kernel command line
// reaches the guest as one comma), -uuid. -cpu is split by QEMU itself at
// the first comma, so a CPU model name is restricted to [A-Za-z0-9_.+-]
// ("help" refused) instead of escaped.
//
// # Decisions
//
//   - Memory: -m is memory.guest rounded down to a whole MiB (1G = 953 MiB),
//     never up, so the guest stays within resources.limits.memory.
//   - CPU: host-passthrough and host-model are -cpu host under KVM and
//     -cpu max under TCG (-cpu host needs KVM; max is everything TCG
//     emulates); named models are passed on under either accelerator.
//   - ACPI: features.acpi.enabled=false is -machine …,acpi=off, which QEMU
//     7.2 accepts on q35 and pc: QEMU then builds no ACPI tables. On pc and
//     with OVMF on q35 the guest has no ACPI; with SeaBIOS on q35 SeaBIOS
//     installs its own fallback tables (the ICH9 PM device is always there).
//   - Machine: always vmport=off,dump-guest-core=off.
//   - Block nodes: "file-<disk>" (protocol: file or host_device) under
//     "drive-<disk>" (format: raw or qcow2); a disk name longer than 25
//     characters becomes its first 16, "-" and 8 hex digits of its SHA-256,
//     so node names stay within QEMU's 31. Devices are "ua-<disk>" and
//     "ua-<interface>" (KubeVirt's aliases); a disk and an interface with
//     the same name are an error. Read-only disks (disk.readonly, CD-ROMs,
//     Drive.ReadOnly) get read-only=on on both nodes; writable ones pass
//     discards through (discard=unmap). auto-read-only is not used: with
//     read-only=on it changes nothing, and on a writable disk it would turn
//     a permission error into a silently read-only disk.
//   - Cache and io (KubeVirt's rules, v1alpha1.DiskCache and DefaultDiskIO,
//     over the node's facts Drive.DirectIO and Drive.Preallocated): cache
//     none is cache.direct=on on both nodes and write-cache=on on the
//     device, writethrough write-cache=off, writeback write-cache=on; io
//     native is aio=native on the protocol node (only with cache.direct);
//     a shareable disk is locking=off on the protocol node and share-rw=on
//     on the device.
//   - Iothreads (v1alpha1.PlanIOThreads, KubeVirt's allocation) are
//     -object iothread,id=iothread<N> before the disks, and iothread= on
//     the virtio-blk-pci devices given one; blockMultiQueue is num-queues
//     = vCPUs on every virtio-blk-pci.
//   - Buses: SATA is q35's built-in AHCI, one device per port ide.0–ide.5
//     in disk order (a 7th is an error; QEMU refuses a read-only ide-hd, so
//     that is an error too); SCSI is one virtio-scsi-pci controller, LUNs in
//     disk order at channel 0, target 0.
//   - Boot order: bootOrder is bootindex, plus -boot strict=on when any disk
//     has one ("disks without it are not bootable"); with kernelBoot the
//     kernel still comes first.
//   - Secure Boot (efi.secureBoot, default true) uses the secboot OVMF build
//     with smm=on and secure pflash; the vars template is the one with
//     Microsoft's keys enrolled (OVMF.Pick says which file to copy to
//     Paths.EFIVars).
//   - User networking (standalone): the host side is the network's first
//     address, the guest's DHCP lease its second (10.0.2.1 / 10.0.2.2), as
//     behind KubeVirt's masquerade.
//   - -name is guest=<namespace>_<name>, namespace "default" when empty;
//     -uuid is firmware.uuid, or the UUID defaulting would derive.
//   - Taps: fd=N for one queue, fds=N:M for multiqueue (queues follow the
//     fd count) with mq=on,vectors=2N+2 on virtio-net-pci; vhost=on only
//     when Facts.VhostNet and the model is virtio.
package cmdline
