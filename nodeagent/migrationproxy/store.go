package migrationproxy

import (
	"crypto/tls"
	"errors"
	"sync/atomic"
)

// Store holds a node's current TLS material. Reload swaps it; every TLS
// configuration the package builds reads the Store at handshake time, so
// a rotated certificate or CA applies to new connections without a
// restart (connections already established keep theirs).
type Store struct {
	current atomic.Pointer[Material]
}

// NewStore returns a Store holding m.
func NewStore(m *Material) *Store {
	s := &Store{}
	s.current.Store(m)
	return s
}

// Reload makes m the material of new connections.
func (s *Store) Reload(m *Material) error {
	if m == nil {
		return errors.New("reload migration TLS material: nil")
	}
	s.current.Store(m)
	return nil
}

// Current is the material new connections use.
func (s *Store) Current() *Material { return s.current.Load() }

// ServerConfig is the proxy server's TLS configuration: TLS 1.3 only, the
// node's certificate, and a client certificate required and verified
// against the migration CA — all from the material current at the
// handshake.
func (s *Store) ServerConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			m := s.Current()
			return &tls.Config{
				MinVersion: tls.VersionTLS13,
				GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
					return &m.cert, nil
				},
				ClientAuth: tls.RequireAndVerifyClientCert,
				ClientCAs:  m.pool,
			}, nil
		},
	}
}

// ClientConfig is the TLS configuration of a connection to the proxy of
// node serverName: TLS 1.3 only, the server's certificate verified
// against the migration CA for that node name, and the node's own
// certificate as the client certificate.
func (s *Store) ClientConfig(serverName string) *tls.Config {
	m := s.Current()
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		ServerName: serverName,
		RootCAs:    m.pool,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return &m.cert, nil
		},
	}
}
