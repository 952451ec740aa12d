package admission

// The webhooks' URL paths on kemu-api, named in deploy/base/webhooks.yaml.
const (
	// PathMutateVMI stores a new VMI's defaults.
	PathMutateVMI = "/mutate/virtualmachineinstances"
	// PathValidateVMI validates VMI creates and updates.
	PathValidateVMI = "/validate/virtualmachineinstances"
	// PathValidateVM validates VM creates and updates.
	PathValidateVM = "/validate/virtualmachines"
	// PathValidateVMIM validates VMIM creates and updates.
	PathValidateVMIM = "/validate/virtualmachineinstancemigrations"
)

// Paths lists every webhook path Handlers serves.
var Paths = []string{PathMutateVMI, PathValidateVMI, PathValidateVM, PathValidateVMIM}
