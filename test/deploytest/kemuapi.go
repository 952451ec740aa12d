package deploytest

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kemu-dev/kemu/api/client/clientset/versioned"
	"github.com/kemu-dev/kemu/api/subresources"
	v1 "github.com/kemu-dev/kemu/api/v1alpha1"
	"github.com/kemu-dev/kemu/test/cluster"
)

// WaitKemuAPI waits until kemu-api's replicas in kemuNS are ready,
// kube-apiserver serves subresources.kemu.dev through it (its CA bundle is
// in the APIService) and its webhooks answer a server-side dry run of a
// VMI create in namespace ns (image: a containerDisk image).
func WaitKemuAPI(ctx context.Context, kube kubernetes.Interface, kemu versioned.Interface, kemuNS, ns, image string) error {
	probe := &v1.VirtualMachineInstance{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "kemu-api-probe"},
		Spec: v1.VirtualMachineInstanceSpec{
			Domain: v1.DomainSpec{
				Memory:  &v1.Memory{Guest: ptr(resource.MustParse("128Mi"))},
				Devices: v1.Devices{Disks: []v1.Disk{{Name: "root"}}},
			},
			Volumes: []v1.Volume{{Name: "root", ContainerDisk: &v1.ContainerDiskSource{Image: image}}},
		},
	}
	return cluster.Poll(ctx, func() error {
		d, err := kube.AppsV1().Deployments(kemuNS).Get(ctx, "kemu-api", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if d.Spec.Replicas == nil || d.Status.ReadyReplicas != *d.Spec.Replicas || d.Status.UpdatedReplicas != *d.Spec.Replicas {
			return fmt.Errorf("kemu-api Deployment not ready: %+v", d.Status)
		}
		if _, err := kube.Discovery().ServerResourcesForGroupVersion(subresources.GroupVersion); err != nil {
			return fmt.Errorf("discovery of %s: %w", subresources.GroupVersion, err)
		}
		_, err = kemu.KemuV1alpha1().VirtualMachineInstances(ns).Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err
	})
}

func ptr[T any](v T) *T { return &v }
