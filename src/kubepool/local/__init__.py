"""The local Kubernetes cluster for development and tests: `kubepool local` (`cli`) over `up`/`down`/`status`
(`controlplane`), the node kinds (`realnode`, fake nodes `kwok`), the components and their processes
(`components`, `processes`), their command lines (`flags`), the state dir and ports (`layout`), the node config
(`nodeconfig`), its PKI (`pki`) and the node agent (`agent`, kubepool's own kubelet, a process of its own)."""
