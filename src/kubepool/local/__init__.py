"""The local Kubernetes cluster for development and tests: control plane (`controlplane`), its PKI (`pki`),
fake nodes (`kwok`), the node agent (`agent`, kubepool's own kubelet) and `kubepool local` (`cli`)."""
