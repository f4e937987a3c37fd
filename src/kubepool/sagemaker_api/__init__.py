"""A SageMaker-compatible API server (AWS JSON 1.1): SageMaker's own clients, unchanged, run MLJobs.

CreateTrainingJob and its friends are translated into MLJobs and back (translate.py, status.py), requests are
SigV4-verified against access keys kept in a Kubernetes Secret (keys.py, sigv4.py), and CloudWatch Logs reads are
served from the instances' pod logs (logs.py).
"""
