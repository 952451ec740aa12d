// Package rfb is a small RFB (VNC) client: enough of RFB 3.3, 3.7 and 3.8
// to take a screenshot of a VM's screen through the launcher's Vnc stream.
//
// It speaks to a server it does not trust: the framebuffer's size, the
// desktop name, reason strings, rectangles and message lengths are bounded
// (MaxWidth, MaxHeight, MaxPixels, MaxNameLength, MaxReasonLength,
// MaxCutText) and checked before anything is allocated; the context's
// deadline bounds every read and write.
//
// The client offers only security type None (QEMU's VNC server on the
// launcher's unix socket asks for none: the socket is the access control),
// asks for a shared session, sets a 32-bit true-colour pixel format, and
// accepts only the Raw encoding and the DesktopSize pseudo-encoding.
package rfb
