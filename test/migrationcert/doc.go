// Package migrationcert tests the migration certificates end to end on a
// real kube-apiserver (`cluster` tag): node agents (nodeagent/migrationcert)
// get their certificates through the CertificateSigningRequest API from
// the controller's signer (controller/migrationcert), with deploy/'s RBAC
// and Pod-bound tokens, and their proxies talk. The controller may not
// import the node agent, so the test joining them lives here.
package migrationcert
