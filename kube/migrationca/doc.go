// Package migrationca is kemu's migration certificate authority and the
// contract of its node certificates, shared by the controller (which holds
// the CA key and signs) and the node agents (each holds only its own key
// and asks for its certificate with a CertificateSigningRequest).
//
// A node certificate is ECDSA P-256 with CN and one DNS SAN, the node's
// name, for server and client auth (NodeTemplate). The CA lives in a
// Secret only the controller reads (EnsureSecret, SecretName); its public
// bundle is published in a ConfigMap (ConfigMapName, key CACertKey). A
// node agent asks with signer SignerName; ReviewRequest is the rule the
// controller approves and signs by: the requester is the node agent's
// ServiceAccount with a token bound to a Pod on exactly one node, and the
// request names that node and nothing else. See docs/deploy.md.
package migrationca
