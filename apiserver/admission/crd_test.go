package admission

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	utilvalidation "k8s.io/apimachinery/pkg/util/validation"

	"github.com/kemu-dev/kemu/api/validation"
)

// The CRD's CEL rules and bounds repeat api/validation's limits (a marker
// cannot import a Go constant): they must agree.
func TestCRDRulesMatchValidation(t *testing.T) {
	for _, f := range []string{"kemu.dev_virtualmachineinstances.yaml", "kemu.dev_virtualmachines.yaml"} {
		b, err := os.ReadFile(filepath.Join("..", "..", "deploy", "base", "crd", f))
		if err != nil {
			t.Fatal(err)
		}
		crd := string(b)
		for _, want := range []string{
			"quantity('" + validation.MinGuestMemory.String() + "')",
			"must be at least " + validation.MinGuestMemory.String(),
			"every disk attaches a volume of its name",
			"every interface attaches a network of its name",
		} {
			if !strings.Contains(crd, want) {
				t.Errorf("%s lacks %q", f, want)
			}
		}
		// Names are DNS labels (validation's dnsLabel).
		if n := strings.Count(crd, fmt.Sprintf("maxLength: %d", utilvalidation.DNS1123LabelMaxLength)); n < 4 {
			t.Errorf("%s: %d names bounded to %d", f, n, utilvalidation.DNS1123LabelMaxLength)
		}
	}
}
