// Package metrics is the node agent's per-VMI metrics (kemu_vmi_*, in the
// spirit of KubeVirt's kubevirt_vmi_*): a prometheus.Collector that, on a
// scrape, asks each current launcher on the node for its figures (GetStats,
// once per launcher, concurrently, with a timeout each), keeps the answers
// for a short TTL so that several scrapers never multiply the RPCs, and
// turns them into series labelled namespace, name and node. Series exist
// only while their VMI has a launcher here: nothing is remembered between
// scrapes but the cache.
package metrics
