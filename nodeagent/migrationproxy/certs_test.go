package migrationproxy

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/x509"
	"slices"
	"testing"
	"time"
)

func TestIssueNode(t *testing.T) {
	now := time.Now()
	ca, err := NewCA(now)
	if err != nil {
		t.Fatal(err)
	}
	if !ca.Cert.IsCA || ca.Cert.NotAfter.After(now.Add(CAValidity)) {
		t.Fatalf("CA: IsCA %v, NotAfter %v", ca.Cert.IsCA, ca.Cert.NotAfter)
	}
	m, err := ca.IssueNode("node-a", now)
	if err != nil {
		t.Fatal(err)
	}
	leaf := m.Leaf()
	if m.Node != "node-a" || leaf.Subject.CommonName != "node-a" || !slices.Equal(leaf.DNSNames, []string{"node-a"}) {
		t.Errorf("names: Node %q CN %q SANs %v", m.Node, leaf.Subject.CommonName, leaf.DNSNames)
	}
	if !slices.Equal(leaf.ExtKeyUsage, []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}) {
		t.Errorf("ExtKeyUsage %v", leaf.ExtKeyUsage)
	}
	if pub, ok := leaf.PublicKey.(*ecdsa.PublicKey); !ok || pub.Curve != elliptic.P256() {
		t.Errorf("key %T, want ECDSA P-256", leaf.PublicKey)
	}
	if leaf.NotBefore.After(now) || leaf.NotAfter.After(now.Add(NodeValidity)) || leaf.IsCA {
		t.Errorf("validity %v..%v, IsCA %v", leaf.NotBefore, leaf.NotAfter, leaf.IsCA)
	}
	if _, err := ca.IssueNode("", now); err == nil {
		t.Error("IssueNode with an empty name succeeded")
	}
}

func TestSecretDataRoundTrip(t *testing.T) {
	ca := newTestCA(t)
	data, err := ca.SecretData()
	if err != nil {
		t.Fatal(err)
	}
	back, err := CAFromSecretData(data)
	if err != nil {
		t.Fatal(err)
	}
	if !back.Cert.Equal(ca.Cert) || !back.Key.Equal(ca.Key) {
		t.Fatal("CA differs after a round trip")
	}
	m, err := back.IssueNode("node-a", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	md := m.SecretData()
	if _, ok := md[CAKeyKey]; ok {
		t.Fatal("node material carries the CA key")
	}
	m2, err := MaterialFromSecretData(md)
	if err != nil {
		t.Fatal(err)
	}
	if !m2.Leaf().Equal(m.Leaf()) || m2.Node != "node-a" {
		t.Fatal("material differs after a round trip")
	}
}

func TestSecretDataRefused(t *testing.T) {
	ca, other := newTestCA(t), newTestCA(t)
	caData, _ := ca.SecretData()
	otherData, _ := other.SecretData()
	node, _ := ca.IssueNode("node-a", time.Now())
	nodeData := node.SecretData()
	with := func(base map[string][]byte, k string, v []byte) map[string][]byte {
		m := map[string][]byte{}
		for kk, vv := range base {
			m[kk] = vv
		}
		if v == nil {
			delete(m, k)
		} else {
			m[k] = v
		}
		return m
	}
	caTests := []struct {
		name string
		data map[string][]byte
	}{
		{"no ca.crt", with(caData, CACertKey, nil)},
		{"no ca.key", with(caData, CAKeyKey, nil)},
		{"key of another CA", with(caData, CAKeyKey, otherData[CAKeyKey])},
		{"not a CA", with(caData, CACertKey, nodeData[TLSCertKey])},
		{"garbage", with(caData, CACertKey, []byte("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"))},
	}
	for _, tt := range caTests {
		if _, err := CAFromSecretData(tt.data); err == nil {
			t.Errorf("CA %s: decoded", tt.name)
		}
	}
	nodeTests := []struct {
		name string
		data map[string][]byte
	}{
		{"no tls.crt", with(nodeData, TLSCertKey, nil)},
		{"no tls.key", with(nodeData, TLSKeyKey, nil)},
		{"no ca.crt", with(nodeData, CACertKey, nil)},
		{"certificate of another CA", with(nodeData, CACertKey, otherData[CACertKey])},
		{"key pair mismatch", with(nodeData, TLSKeyKey, otherData[CAKeyKey])},
	}
	for _, tt := range nodeTests {
		if _, err := MaterialFromSecretData(tt.data); err == nil {
			t.Errorf("material %s: decoded", tt.name)
		}
	}
}

// A CA bundle (new CA first, the previous after it) trusts both.
func TestCABundle(t *testing.T) {
	old, cur := newTestCA(t), newTestCA(t)
	cur.Bundle = append(cur.Bundle, old.Cert)
	data, err := cur.SecretData()
	if err != nil {
		t.Fatal(err)
	}
	back, err := CAFromSecretData(data)
	if err != nil {
		t.Fatal(err)
	}
	if len(back.Bundle) != 2 || !back.Cert.Equal(cur.Cert) {
		t.Fatalf("bundle of %d, first is the current CA: %v", len(back.Bundle), back.Cert.Equal(cur.Cert))
	}
	oldNode, _ := old.IssueNode("node-a", time.Now())
	if _, err := NewMaterial(data[CACertKey], oldNode.SecretData()[TLSCertKey], oldNode.SecretData()[TLSKeyKey]); err != nil {
		t.Fatalf("a node certificate of the previous CA is refused by the bundle: %v", err)
	}
}
