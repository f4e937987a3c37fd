"""lightkube resource types for kubepool's own kinds (generic: the pydantic models in kubepool.api stay
the typed view; these only tell lightkube the group, version and plural)."""

from __future__ import annotations

from lightkube.generic_resource import create_global_resource, create_namespaced_resource

from kubepool import naming

MLJobResource = create_namespaced_resource(
    naming.GROUP, naming.VERSION, naming.MLJOB_KIND, naming.MLJOB_PLURAL, verbs=None
)
ComputePoolResource = create_global_resource(
    naming.GROUP, naming.VERSION, naming.POOL_KIND, naming.POOL_PLURAL, verbs=None
)
