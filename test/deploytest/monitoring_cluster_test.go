//go:build cluster

package deploytest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	ctrlmetrics "github.com/kemu-dev/kemu/controller/metrics"
	"github.com/kemu-dev/kemu/nodeagent/metrics"
	"github.com/kemu-dev/kemu/test/cluster"
)

// serviceMonitor is the part of monitoring.coreos.com/v1 ServiceMonitor
// the test reads.
type serviceMonitor struct {
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		Selector          metav1.LabelSelector `json:"selector"`
		NamespaceSelector struct {
			MatchNames []string `json:"matchNames"`
		} `json:"namespaceSelector"`
		Endpoints []struct {
			Port        string `json:"port"`
			Path        string `json:"path"`
			HonorLabels bool   `json:"honorLabels"`
		} `json:"endpoints"`
	} `json:"spec"`
}

// kustomize builds dir with the real kubectl and returns its objects by
// kind.
func kustomize(t *testing.T, dir string) map[string][][]byte {
	t.Helper()
	bin := os.Getenv(cluster.EnvBinDir) // as test/cluster finds kubectl
	if bin == "" {
		root, err := cluster.RepoRoot()
		if err != nil {
			t.Fatal(err)
		}
		bin = filepath.Join(root, "_out", "k8s", "bin")
	}
	out, err := exec.Command(filepath.Join(bin, "kubectl"), "kustomize", dir).CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl kustomize %s: %v\n%s", dir, err, out)
	}
	objs := map[string][][]byte{}
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(out)))
	for {
		doc, err := r.Read()
		if err != nil {
			break
		}
		var m metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &m); err != nil {
			t.Fatal(err)
		}
		objs[m.Kind] = append(objs[m.Kind], doc)
	}
	return objs
}

// deploy/monitoring builds on its own and beside deploy/: its
// ServiceMonitors each select one of deploy/'s metrics Services in
// kemu-system by a port it has, whose target is the container port the
// component serves /metrics on; the node agent's keeps the VMIs' namespace
// label (honorLabels); the dashboard is valid JSON for Grafana's sidecar
// and queries only metrics kemu exports.
func TestMonitoringOverlay(t *testing.T) {
	root, err := cluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	alone := kustomize(t, filepath.Join(root, "deploy", "monitoring"))
	if len(alone["ServiceMonitor"]) != 2 || len(alone["ConfigMap"]) != 1 || len(alone) != 2 {
		t.Fatalf("deploy/monitoring: %d ServiceMonitors, %d ConfigMaps, kinds %d; want 2, 1, 2", len(alone["ServiceMonitor"]), len(alone["ConfigMap"]), len(alone))
	}

	dir := t.TempDir()
	var res []string
	for _, d := range []string{"deploy", filepath.Join("deploy", "monitoring")} {
		rel, err := filepath.Rel(dir, filepath.Join(root, d))
		if err != nil {
			t.Fatal(err)
		}
		res = append(res, "  - "+rel)
	}
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte("resources:\n"+strings.Join(res, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	all := kustomize(t, dir)
	var services []corev1.Service
	for _, b := range all["Service"] {
		var s corev1.Service
		if err := yaml.Unmarshal(b, &s); err != nil {
			t.Fatal(err)
		}
		services = append(services, s)
	}
	// The port each component serves /metrics on, by container port name.
	metricsPorts := map[string]map[string]int32{}
	for kind, docs := range map[string][][]byte{"DaemonSet": all["DaemonSet"], "Deployment": all["Deployment"]} {
		for _, b := range docs {
			var spec corev1.PodTemplateSpec
			var name string
			if kind == "DaemonSet" {
				var ds appsv1.DaemonSet
				if err := yaml.Unmarshal(b, &ds); err != nil {
					t.Fatal(err)
				}
				spec, name = ds.Spec.Template, ds.Name
			} else {
				var d appsv1.Deployment
				if err := yaml.Unmarshal(b, &d); err != nil {
					t.Fatal(err)
				}
				spec, name = d.Spec.Template, d.Name
			}
			ports := map[string]int32{}
			for _, c := range spec.Spec.Containers {
				for _, p := range c.Ports {
					ports[p.Name] = p.ContainerPort
				}
			}
			metricsPorts[name] = ports
		}
	}
	want := map[string]struct {
		service, workload, containerPort string
		honorLabels                      bool
	}{
		"kemu-nodeagent":  {"kemu-nodeagent-metrics", "kemu-nodeagent", "health", true},
		"kemu-controller": {"kemu-controller-metrics", "kemu-controller", "metrics", false},
	}
	for _, b := range all["ServiceMonitor"] {
		var sm serviceMonitor
		if err := yaml.Unmarshal(b, &sm); err != nil {
			t.Fatal(err)
		}
		w, ok := want[sm.Name]
		if !ok {
			t.Errorf("unexpected ServiceMonitor %s", sm.Name)
			continue
		}
		delete(want, sm.Name)
		sel, err := metav1.LabelSelectorAsSelector(&sm.Spec.Selector)
		if err != nil {
			t.Fatal(err)
		}
		var matched []corev1.Service
		for _, s := range services {
			if slices.Contains(sm.Spec.NamespaceSelector.MatchNames, s.Namespace) && sel.Matches(labels.Set(s.Labels)) {
				matched = append(matched, s)
			}
		}
		if len(matched) != 1 || matched[0].Name != w.service {
			t.Errorf("ServiceMonitor %s selects %d Services, want only %s", sm.Name, len(matched), w.service)
			continue
		}
		svc := matched[0]
		if len(sm.Spec.Endpoints) != 1 || sm.Spec.Endpoints[0].Path != "/metrics" || sm.Spec.Endpoints[0].HonorLabels != w.honorLabels {
			t.Errorf("ServiceMonitor %s endpoints %+v", sm.Name, sm.Spec.Endpoints)
			continue
		}
		i := slices.IndexFunc(svc.Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == sm.Spec.Endpoints[0].Port })
		if i < 0 {
			t.Errorf("Service %s has no port %s", svc.Name, sm.Spec.Endpoints[0].Port)
			continue
		}
		p := svc.Spec.Ports[i]
		cport, ok := metricsPorts[w.workload][p.TargetPort.String()]
		if p.TargetPort.String() != w.containerPort || !ok || cport != p.Port {
			t.Errorf("Service %s port %s targets %s (container port %d), want %s on %d", svc.Name, p.Name, p.TargetPort.String(), cport, w.containerPort, p.Port)
		}
		if svc.Annotations["prometheus.io/scrape"] != "true" || svc.Annotations["prometheus.io/path"] != "/metrics" {
			t.Errorf("Service %s annotations %v", svc.Name, svc.Annotations)
		}
	}
	for name := range want {
		t.Errorf("no ServiceMonitor %s", name)
	}

	var cm corev1.ConfigMap
	if err := yaml.Unmarshal(alone["ConfigMap"][0], &cm); err != nil {
		t.Fatal(err)
	}
	if cm.Namespace != "kemu-system" || cm.Labels["grafana_dashboard"] != "1" {
		t.Errorf("dashboard ConfigMap %s/%s labels %v", cm.Namespace, cm.Name, cm.Labels)
	}
	var dash struct {
		UID    string `json:"uid"`
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal([]byte(cm.Data["kemu-vmis.json"]), &dash); err != nil || dash.UID == "" || len(dash.Panels) == 0 {
		t.Fatalf("dashboard kemu-vmis.json: %v (uid %q, %d panels)", err, dash.UID, len(dash.Panels))
	}
	known := append(metrics.Names(), ctrlmetrics.PhaseCountName)
	name := regexp.MustCompile(`kemu_[a-z_]+`)
	queried := map[string]bool{}
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			for _, n := range name.FindAllString(tg.Expr, -1) {
				if !slices.Contains(known, n) {
					t.Errorf("panel %q queries %s, which kemu does not export", p.Title, n)
				}
				queried[n] = true
			}
		}
	}
	for _, n := range []string{"kemu_vmi_cpu_usage_seconds_total", "kemu_vmi_memory_resident_bytes", "kemu_vmi_network_receive_bytes_total",
		"kemu_vmi_storage_write_traffic_bytes_total"} {
		if !queried[n] {
			t.Errorf("the dashboard shows no %s", n)
		}
	}
}
