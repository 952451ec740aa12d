// Package nodeapi holds the tests of the node agent's API
// (nodeagent/nodeapi) against a real launcher command server running the
// test guest in real QEMU, over real mutually authenticated TLS with
// certificates from a test CA (kube/migrationca). It has no code of its
// own: it joins the node agent and the launcher.
package nodeapi
