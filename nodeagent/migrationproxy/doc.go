// Package migrationproxy is the node agent's migration proxy: the only
// path a live migration's streams take between nodes.
//
// Each node agent runs one Server on a TCP address (DefaultAddr). It
// speaks TLS 1.3 only and requires a client certificate, verified against
// kemu's migration CA; clients verify the server's certificate for the
// target node's name. Certificates are ECDSA P-256, CN and DNS SAN the
// node name, for server and client auth (kube/migrationca: the CA in a
// Secret only the controller reads; each node agent gets its certificate
// through a CertificateSigningRequest, nodeagent/migrationcert; CA.IssueNode
// makes a whole node's material in one process). A Store holds the current
// material; Store.Reload applies to new connections without a restart.
//
// After the handshake the client sends one header and the server answers
// with one status byte (StatusOK, or a refusal followed by the close):
//
//	"KMIG" | version 1 | uidLen (1..64) | uid [a-z0-9-] | chanLen (1..16) | channel
//
// channel is one of ChannelMain, ChannelDisk, ChannelControl. The server
// reads the header with a deadline (HeaderTimeout) and never more than
// MaxHeaderLen bytes. A migration is Registered with its source node,
// and only that node's certificate may open its channels. A connection
// whose certificate, header, migration UID, channel or peer node is not
// accepted is closed before the server dials anything: not one byte
// reaches the launcher's socket. Otherwise the server dials the unix
// socket Registered for that UID and channel and splices the two both
// ways, half-closes included (QEMU's EOF), until both directions ended,
// Unregister ends the migration, or the server is closed.
//
// On the source node, ListenSource creates one unix socket per channel
// (SocketName, mode 0600) in the source launcher's socket directory and
// splices every connection accepted there to a new TLS connection to the
// target's Server (Dial).
package migrationproxy
