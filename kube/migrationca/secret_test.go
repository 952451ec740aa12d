package migrationca

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

const (
	testNamespace = "kemu-system"
	testSecret    = "kemu-migration-ca"
)

func caSecret(t *testing.T, ca *CA) *corev1.Secret {
	t.Helper()
	data, err := ca.SecretData()
	if err != nil {
		t.Fatal(err)
	}
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: testNamespace, Name: testSecret}, Data: data}
}

func countCreates(client *fake.Clientset) int {
	n := 0
	for _, a := range client.Actions() {
		if a.GetVerb() == "create" && a.GetResource().Resource == "secrets" {
			n++
		}
	}
	return n
}

func TestEnsureSecret(t *testing.T) {
	ctx := context.Background()
	existing := newTestCA(t)
	raced := newTestCA(t)
	tests := []struct {
		name    string
		objects []runtime.Object
		// race makes Create fail with AlreadyExists after another controller
		// created the Secret holding raced.
		race        bool
		want        *CA // nil: a new CA
		wantCreates int
	}{
		{name: "absent: created", wantCreates: 1},
		{name: "present: read", objects: []runtime.Object{caSecret(t, existing)}, want: existing},
		{name: "created by another controller meanwhile", race: true, want: raced, wantCreates: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			client := fake.NewClientset(tt.objects...)
			if tt.race {
				client.PrependReactor("create", "secrets", func(k8stesting.Action) (bool, runtime.Object, error) {
					if err := client.Tracker().Add(caSecret(t, raced)); err != nil {
						t.Fatal(err)
					}
					return true, nil, apierrors.NewAlreadyExists(corev1.Resource("secrets"), testSecret)
				})
			}
			ca, err := EnsureSecret(ctx, client, testNamespace, testSecret)
			if err != nil {
				t.Fatal(err)
			}
			if n := countCreates(client); n != tt.wantCreates {
				t.Errorf("%d creates, want %d", n, tt.wantCreates)
			}
			if tt.want != nil && !ca.Cert.Equal(tt.want.Cert) {
				t.Error("returned a CA other than the Secret's")
			}
			s, err := client.CoreV1().Secrets(testNamespace).Get(ctx, testSecret, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			stored, err := CAFromSecretData(s.Data)
			if err != nil {
				t.Fatal(err)
			}
			if !stored.Cert.Equal(ca.Cert) || !stored.Key.Equal(ca.Key) {
				t.Error("the returned CA is not the stored one")
			}
			again, err := EnsureSecret(ctx, client, testNamespace, testSecret)
			if err != nil || !again.Cert.Equal(ca.Cert) {
				t.Errorf("second EnsureSecret: %v, same CA %v", err, err == nil && again.Cert.Equal(ca.Cert))
			}
		})
	}
}

// A Secret that holds no valid CA is an error and stays as it is.
func TestEnsureSecretCorrupt(t *testing.T) {
	bad := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: testNamespace, Name: testSecret}, Data: map[string][]byte{CACertKey: []byte("x")}}
	client := fake.NewClientset(bad)
	if _, err := EnsureSecret(context.Background(), client, testNamespace, testSecret); err == nil {
		t.Fatal("EnsureSecret accepted a corrupt Secret")
	}
	for _, a := range client.Actions() {
		if a.GetVerb() != "get" {
			t.Fatalf("EnsureSecret did %s on a corrupt Secret", a.GetVerb())
		}
	}
}
