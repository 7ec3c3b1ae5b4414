package components

import (
	"net/url"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
)

func etcdConfig(dataDir, clientURL, peerURL string, noFsync bool) (*embed.Config, error) {
	cu, err := url.Parse(clientURL)
	if err != nil {
		return nil, err
	}
	pu, err := url.Parse(peerURL)
	if err != nil {
		return nil, err
	}
	cfg := embed.NewConfig()
	cfg.Name = "localkube"
	cfg.Dir = dataDir
	cfg.ListenClientUrls = []url.URL{*cu}
	cfg.AdvertiseClientUrls = []url.URL{*cu}
	cfg.ListenPeerUrls = []url.URL{*pu}
	cfg.AdvertisePeerUrls = []url.URL{*pu}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.UnsafeNoFsync = noFsync
	// The API server's watch cache needs progress notifications (consistent reads from cache);
	// 5s is what Kubernetes' own test etcd uses.
	cfg.WatchProgressNotifyInterval = 5 * time.Second
	cfg.LogLevel = "warn"
	cfg.LogOutputs = []string{"stderr"}
	// The API server compacts every 5 minutes; a small periodic retention keeps the data directory
	// from growing during long test runs.
	cfg.AutoCompactionMode = "periodic"
	cfg.AutoCompactionRetention = "1h"
	return cfg, nil
}
