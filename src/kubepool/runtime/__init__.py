"""The runtime image's entrypoint: one program for every instance of a job (`python -m kubepool.runtime`).

Modules: `main` (the supervisor), `launcher` (runs the payload), `ray_node` (this instance's Ray node),
`gate` (wait for instances), `shutdown` (head -> worker handshake), `sagemaker` and `channels` (the /opt/ml
contract and its data), `snowflake` (Snowflake's banners and env), `result` (the payload's outcome), `hosts`.
"""
