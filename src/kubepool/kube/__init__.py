"""The one place that talks to the Kubernetes API: `aio` (the operator's async client), `sync` (the SDK,
CLI and runtime), both built on lightkube, with kubepool's resource types and error vocabulary."""
