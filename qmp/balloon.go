package qmp

import "context"

// BalloonGuestStatsProperty and BalloonPollingProperty are the virtio
// balloon device's QOM properties for the guest's memory statistics: the
// figures its driver last sent, and how often (seconds) QEMU asks for them
// (0, the default: never).
const (
	BalloonGuestStatsProperty = "guest-stats"
	BalloonPollingProperty    = "guest-stats-polling-interval"
)

// BalloonStats are the statistics of the guest's balloon driver, in bytes
// or events since the guest booted. QEMU reports -1 for a figure the driver
// never sent (an older driver, or none yet).
type BalloonStats struct {
	SwapIn          int64 `json:"stat-swap-in"`
	SwapOut         int64 `json:"stat-swap-out"`
	MajorFaults     int64 `json:"stat-major-faults"`
	MinorFaults     int64 `json:"stat-minor-faults"`
	FreeMemory      int64 `json:"stat-free-memory"`
	TotalMemory     int64 `json:"stat-total-memory"`
	AvailableMemory int64 `json:"stat-available-memory"`
	DiskCaches      int64 `json:"stat-disk-caches"`
}

// BalloonGuestStats is the guest-stats property: the statistics and when
// the guest last sent them (seconds since the epoch, 0: never).
type BalloonGuestStats struct {
	Stats      BalloonStats `json:"stats"`
	LastUpdate int64        `json:"last-update"`
}

// QOMSet sets an object's property (qom-set).
func (m *Monitor) QOMSet(ctx context.Context, path, property string, value any) error {
	return m.Execute(ctx, "qom-set", map[string]any{"path": path, "property": property, "value": value}, nil)
}

// QueryBalloonGuestStats reads the guest-stats property of the balloon
// device at QOM path.
func (m *Monitor) QueryBalloonGuestStats(ctx context.Context, path string) (BalloonGuestStats, error) {
	var s BalloonGuestStats
	return s, m.Execute(ctx, "qom-get", map[string]any{"path": path, "property": BalloonGuestStatsProperty}, &s)
}
