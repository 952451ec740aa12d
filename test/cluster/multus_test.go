//go:build cluster

package cluster_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kemu-dev/kemu/test/cluster"
)

// TestMultus: a node with Multus's thin plugin in front of its bridge
// network. A Pod without annotations keeps the cluster network (its IP in
// the node's range, eth0); two Pods with a NetworkAttachmentDefinition of
// type bridge (a second bridge in the node, host-local addresses) get the
// secondary interface under the name the annotation asks for (KubeVirt's
// pod<hash>), Multus reports it in k8s.v1.cni.cncf.io/network-status, and
// one Pod reaches the other's httpd on the secondary network.
func TestMultus(t *testing.T) {
	c, err := cluster.Start(context.Background(), cluster.Options{Node: true, Multus: true, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := c.InstallNetworkAttachmentCRD(); err != nil {
		t.Fatal(err)
	}
	if err := c.CreateNetworkAttachment(ctx, "default", "blue", map[string]any{
		"cniVersion": "0.4.0", "name": "blue", "type": "bridge", "bridge": "kemusec0",
		"ipam": map[string]any{"type": "host-local", "ranges": [][]map[string]string{{{"subnet": "192.168.77.0/24"}}}},
	}); err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(c.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	const iface = "pod16477688c0e" // KubeVirt's name of network "blue"
	node := c.Nodes[0].Name
	plain := busyboxPod("plain", node, "trap 'exit 0' TERM; sleep 3600 & wait")
	server := busyboxPod("server", node, "trap 'exit 0' TERM; mkdir -p /www; echo secondary > /www/index.html; exec /bin/busybox httpd -f -p 8080 -h /www")
	client := busyboxPod("client", node, "trap 'exit 0' TERM; sleep 3600 & wait")
	for _, p := range []*corev1.Pod{server, client} {
		p.Annotations = map[string]string{"k8s.v1.cni.cncf.io/networks": `[{"name":"blue","namespace":"default","interface":"` + iface + `"}]`}
	}
	for _, p := range []*corev1.Pod{plain, server, client} {
		if _, err := cs.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	secondaryIP := map[string]string{}
	for _, p := range []*corev1.Pod{plain, server, client} {
		err := waitPod(ctx, cs, "default", p.Name, func(p *corev1.Pod) (bool, error) {
			return p.Status.Phase == corev1.PodRunning && p.Status.PodIP != "", nil
		})
		if err != nil {
			t.Fatalf("%v\n--- kubelet ---\n%s", err, c.Node(node).Logs("kubelet", 30))
		}
		got, err := cs.CoreV1().Pods("default").Get(ctx, p.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(got.Status.PodIP, "10.244.11.") {
			t.Errorf("%s: Pod IP %s, want the node's cluster network 10.244.11.0/24", p.Name, got.Status.PodIP)
		}
		var status []struct {
			Name      string   `json:"name"`
			Interface string   `json:"interface"`
			IPs       []string `json:"ips"`
		}
		if s := got.Annotations["k8s.v1.cni.cncf.io/network-status"]; s != "" {
			if err := json.Unmarshal([]byte(s), &status); err != nil {
				t.Errorf("%s: network-status %q: %v", p.Name, s, err)
			}
		}
		for _, st := range status {
			if st.Interface == iface && len(st.IPs) > 0 {
				secondaryIP[p.Name] = st.IPs[0]
			}
		}
		t.Logf("%s: Pod IP %s, network-status %+v", p.Name, got.Status.PodIP, status)
	}
	if _, ok := secondaryIP["plain"]; ok {
		t.Errorf("the Pod without annotation has a secondary network")
	}
	ip := secondaryIP["server"]
	if !strings.HasPrefix(ip, "192.168.77.") || !strings.HasPrefix(secondaryIP["client"], "192.168.77.") {
		t.Fatalf("secondary addresses %v, want 192.168.77.0/24 on %s", secondaryIP, iface)
	}
	// (Debian's static busybox wget crashes with -T: the context bounds it.)
	var out, stderr string
	err = cluster.Poll(ctx, func() error {
		ectx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		var err error
		out, stderr, err = c.KubectlContext(ectx, nil, "exec", "client", "--", "/bin/sh", "-c",
			fmt.Sprintf("ip -4 -o addr show dev %s && wget -q -O- http://%s:8080/", iface, ip))
		if err == nil && (!strings.Contains(out, "secondary") || !strings.Contains(out, secondaryIP["client"])) {
			err = fmt.Errorf("got %q", out)
		}
		return err
	})
	if err != nil {
		t.Errorf("client → server on the secondary network: %q %q %v\n--- multus log ---\n%s", out, stderr, err, c.Node(node).Logs("multus", 0))
	}
}
