// Package signals is the stop loop of a process that runs one VM in the
// foreground, shared by kemu-launcher and kemuctl run: the first SIGTERM or
// SIGINT shuts the guest down gracefully (ACPI power button, then QEMU is
// stopped once the grace period is over: launcher.Shutdown), a second one
// kills QEMU at once; the loop ends when the VM has ended and maps how it
// ended to the process's exit status.
//
// What happens before the VM runs (a signal while it starts) is the
// caller's: kemu-launcher abandons the start and exits ExitStopped, kemuctl
// run cancels it and exits ExitFailed.
package signals
