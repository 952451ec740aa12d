package netsetup

import (
	"crypto/sha256"
	"encoding/hex"
)

// Link names kemu gives the objects it creates in the pod network
// namespace: kbr-<pod interface> for the bridge, ktap-<pod interface> for
// the tap, and the nftables table kemu-<pod interface>. A pod interface
// name too long for IFNAMSIZ is replaced by a hash of it.
const (
	BridgePrefix = "kbr-"
	TapPrefix    = "ktap-"
	TablePrefix  = "kemu-"

	maxLinkName = 15 // IFNAMSIZ - 1
)

// BridgeName is the bridge kemu creates for the pod interface podIface.
func BridgeName(podIface string) string { return linkName(BridgePrefix, podIface) }

// TapName is the tap kemu creates for the pod interface podIface.
func TapName(podIface string) string { return linkName(TapPrefix, podIface) }

// TableName is the nftables table (family ip) of a masquerade interface.
func TableName(podIface string) string { return TablePrefix + podIface }

func linkName(prefix, podIface string) string {
	if len(prefix)+len(podIface) <= maxLinkName {
		return prefix + podIface
	}
	sum := sha256.Sum256([]byte(podIface))
	return prefix + hex.EncodeToString(sum[:])[:maxLinkName-len(prefix)]
}
