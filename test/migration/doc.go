// Package migration holds the tests of a live migration through the node
// agents' migration proxies without a cluster: two launchers (source and
// target) and two migrationproxy Servers on loopback with node
// certificates from one CA. It has no code of its own: the launcher must
// not import the node agent, so the tests that join them live here.
package migration
