// Package vmimetrics holds the tests of the node agent's per-VMI metrics
// (nodeagent/metrics) against a real launcher command server running the
// test guest in real QEMU on a pod network (netsetuptest's namespaces):
// the launcher's figures rise when the guest works, and a scrape of the
// node agent's registry passes promtool. It has no code of its own: it
// joins the node agent and the launcher.
package vmimetrics
