package server

import (
	apidiscoveryv2 "k8s.io/api/apidiscovery/v2"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/endpoints/discovery"
	genericapiserver "k8s.io/apiserver/pkg/server"

	"github.com/kemu-dev/kemu/api/subresources"
)

const groupVersionPath = "/apis/" + subresources.GroupVersion

// resourceList is the group version's discovery document: one entry per
// subresource, as KubeVirt's subresources.kubevirt.io lists them.
func resourceList() *metav1.APIResourceList {
	l := &metav1.APIResourceList{GroupVersion: subresources.GroupVersion}
	for _, v := range subresources.Verbs {
		l.APIResources = append(l.APIResources, metav1.APIResource{
			Name: v.Subresource(), Namespaced: true, Kind: kindOf(v.Resource), Verbs: metav1.Verbs{v.RBACVerb()},
		})
	}
	return l
}

func kindOf(resource string) string {
	if resource == subresources.VMs {
		return "VirtualMachine"
	}
	return "VirtualMachineInstance"
}

// installDiscovery serves /apis (both forms), /apis/<group> and the
// group version's resource list.
func installDiscovery(gs *genericapiserver.GenericAPIServer) {
	gv := metav1.GroupVersionForDiscovery{GroupVersion: subresources.GroupVersion, Version: subresources.Version}
	group := metav1.APIGroup{Name: subresources.Group, Versions: []metav1.GroupVersionForDiscovery{gv}, PreferredVersion: gv}
	gs.DiscoveryGroupManager.AddGroup(group)
	gs.Handler.NonGoRestfulMux.Handle("/apis/"+subresources.Group, discovery.NewAPIGroupHandler(codecs, group))

	list := resourceList()
	gs.Handler.NonGoRestfulMux.Handle(groupVersionPath, discovery.NewAPIVersionHandler(codecs,
		schema.GroupVersion{Group: subresources.Group, Version: subresources.Version},
		discovery.APIResourceListerFunc(func() []metav1.APIResource { return list.APIResources })))

	if gs.AggregatedDiscoveryGroupManager != nil {
		var resources []apidiscoveryv2.APIResourceDiscovery
		byParent := map[string]*apidiscoveryv2.APIResourceDiscovery{}
		for _, v := range subresources.Verbs {
			p, ok := byParent[v.Resource]
			if !ok {
				resources = append(resources, apidiscoveryv2.APIResourceDiscovery{
					Resource: v.Resource, Scope: apidiscoveryv2.ScopeNamespace,
					ResponseKind: &metav1.GroupVersionKind{Kind: kindOf(v.Resource)},
				})
				p = &resources[len(resources)-1]
				byParent[v.Resource] = p
			}
			p.Subresources = append(p.Subresources, apidiscoveryv2.APISubresourceDiscovery{
				Subresource: v.Name, Verbs: []string{v.RBACVerb()},
				ResponseKind: &metav1.GroupVersionKind{Kind: kindOf(v.Resource)},
			})
		}
		gs.AggregatedDiscoveryGroupManager.AddGroupVersion(subresources.Group, apidiscoveryv2.APIVersionDiscovery{
			Version: subresources.Version, Resources: resources, Freshness: apidiscoveryv2.DiscoveryFreshnessCurrent,
		})
	}
}
