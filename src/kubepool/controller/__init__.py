"""The kubepool operator: kopf handlers (`handlers`, `main`) over pure builders, status and admission
functions, talking to the API only through `kubepool.kube.aio`. Run `python -m kubepool.controller`."""
