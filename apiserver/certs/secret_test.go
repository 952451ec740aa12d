package certs

import (
	"crypto/x509"
	"testing"
	"time"
)

func TestRenew(t *testing.T) {
	names := ServiceDNSNames("kemu-system", "kemu-api")
	t0 := time.Date(2026, 11, 24, 0, 0, 0, 0, time.UTC)
	fresh, err := renew(nil, names, t0)
	if err != nil || fresh == nil {
		t.Fatalf("renew(nil): %v %v", fresh, err)
	}
	roundTrip := func(m *material) *material {
		t.Helper()
		data, err := m.encode()
		if err != nil {
			t.Fatal(err)
		}
		got, err := decode(data)
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	fresh = roundTrip(fresh)
	verify := func(m *material, at time.Time, dnsName string) {
		t.Helper()
		pool := x509.NewCertPool()
		for _, c := range m.ca.Bundle {
			pool.AddCert(c)
		}
		if _, err := m.cert.Verify(x509.VerifyOptions{Roots: pool, DNSName: dnsName, CurrentTime: at}); err != nil {
			t.Errorf("serving certificate does not verify at %s: %v", at, err)
		}
	}
	verify(fresh, t0, names[0])

	for _, tc := range []struct {
		name       string
		m          *material
		names      []string
		at         time.Time
		wantChange bool
		wantNewCA  bool
		wantCAs    int
	}{
		{"fresh: nothing", fresh, names, t0.Add(time.Hour), false, false, 1},
		{"serving two thirds through: renewed", fresh, names, t0.Add(ServingValidity * 2 / 3).Add(time.Hour), true, false, 1},
		{"other names: reissued", fresh, ServiceDNSNames("other", "kemu-api"), t0, true, false, 1},
		{"CA two thirds through: new CA, old one kept", fresh, names, t0.Add(CAValidity * 2 / 3).Add(time.Hour), true, true, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			next, err := renew(tc.m, tc.names, tc.at)
			if err != nil {
				t.Fatal(err)
			}
			if (next != nil) != tc.wantChange {
				t.Fatalf("changed %v, want %v", next != nil, tc.wantChange)
			}
			if next == nil {
				return
			}
			next = roundTrip(next)
			if newCA := !next.ca.Cert.Equal(tc.m.ca.Cert); newCA != tc.wantNewCA {
				t.Errorf("new CA %v, want %v", newCA, tc.wantNewCA)
			}
			if len(next.ca.Bundle) != tc.wantCAs {
				t.Errorf("bundle of %d CAs, want %d", len(next.ca.Bundle), tc.wantCAs)
			}
			if next.cert.Equal(tc.m.cert) {
				t.Error("serving certificate not reissued")
			}
			if !sameNames(next.cert.DNSNames, tc.names) {
				t.Errorf("names %v, want %v", next.cert.DNSNames, tc.names)
			}
			verify(next, tc.at, tc.names[0])
		})
	}
	t.Run("expired old CA leaves the bundle", func(t *testing.T) {
		at := t0.Add(CAValidity * 2 / 3).Add(time.Hour)
		rotated, err := renew(fresh, names, at)
		if err != nil {
			t.Fatal(err)
		}
		later := at.Add(CAValidity/3 + time.Hour) // the first CA expired; the second is due too
		again, err := renew(roundTrip(rotated), names, later)
		if err != nil || again == nil {
			t.Fatalf("renew: %v %v", again, err)
		}
		for _, c := range again.ca.Bundle {
			if !later.Before(c.NotAfter) {
				t.Errorf("bundle keeps expired CA %s (notAfter %s)", c.Subject.CommonName, c.NotAfter)
			}
		}
	})
	t.Run("broken secret data is an error", func(t *testing.T) {
		if _, err := decode(map[string][]byte{"ca.crt": []byte("junk")}); err == nil {
			t.Fatal("decode of junk succeeded")
		}
	})
}
