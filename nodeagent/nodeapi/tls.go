package nodeapi

import (
	"crypto/tls"
	"errors"
	"fmt"

	"github.com/kemu-dev/kemu/kube/migrationca"
	"github.com/kemu-dev/kemu/nodeagent/migrationproxy"
)

// serverTLS is the API's TLS configuration: TLS 1.3 only, HTTP/1.1 (the
// streams are Upgrades), the node's certificate and a client certificate
// required, verified against kemu's CA bundle for client auth, and
// kemu-api's identity exactly (checkClient) — all from the material
// current at the handshake, so a renewed certificate applies to new
// connections.
func serverTLS(store *migrationproxy.Store) *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		NextProtos: []string{"http/1.1"},
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			m := store.Current()
			return &tls.Config{
				MinVersion:       tls.VersionTLS13,
				NextProtos:       []string{"http/1.1"},
				Certificates:     []tls.Certificate{*m.TLSCertificate()},
				ClientAuth:       tls.RequireAndVerifyClientCert,
				ClientCAs:        m.CAPool(),
				VerifyConnection: checkClient,
			}, nil
		},
	}
}

// checkClient admits only kemu-api: the verified chain's leaf is exactly
// its client identity (CN nodeapi.ClientCommonName, no SANs, client auth
// only). A node certificate is refused: one node may not reach another
// node's VMIs.
func checkClient(cs tls.ConnectionState) error {
	if len(cs.PeerCertificates) == 0 || len(cs.VerifiedChains) == 0 {
		return errors.New("node API: no verified client certificate")
	}
	leaf := cs.PeerCertificates[0]
	if err := migrationca.CheckClientCertificate(leaf); err != nil {
		return fmt.Errorf("node API: client %q refused: %w", leaf.Subject.CommonName, err)
	}
	return nil
}
